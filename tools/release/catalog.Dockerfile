# The release's catalog image: its file-based catalog (/configs, which names the bundle image by
# digest) served by opm, as OLM's grpc CatalogSource with `spec.image` expects
# (operator-registry's own catalog images have this shape). The build context holds `opm` and
# `configs/`; tools/release/release.sh builds it.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
FROM ${RUNTIME_IMAGE}
COPY opm /bin/opm
COPY configs /configs
LABEL operators.operatorframework.io.index.configs.v1=/configs
USER 65532:65532
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]
