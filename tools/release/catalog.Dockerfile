# The release's catalog image: its file-based catalog (/configs, which names the bundle image by
# digest) served by opm, with grpc_health_probe, which OLM's catalog pod runs as its probes: what
# OLM's grpc CatalogSource with `spec.image` expects (operator-registry's own catalog images have
# this shape). The build context holds `opm`, `grpc_health_probe` and `configs/`;
# tools/release/release.sh builds it.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
FROM ${RUNTIME_IMAGE}
COPY opm grpc_health_probe /bin/
COPY configs /configs
# opm's cache, built now (as operator-registry's own catalog Dockerfiles do): `opm serve` checks
# the cache against the catalog when it starts and refuses an empty one.
RUN ["/bin/opm", "serve", "/configs", "--cache-dir=/tmp/cache", "--cache-only"]
LABEL operators.operatorframework.io.index.configs.v1=/configs
USER 65532:65532
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]
