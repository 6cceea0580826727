# OLM's image for the kind suite: `olm`, `catalog` and `opm`, the binaries tools/olm/build.sh
# builds from their Go modules (the same ones the real control plane's OLM scenarios run as
# processes), on the runtime every image of ours uses (opm links glibc: its sqlite is cgo).
# The build context is a folder holding those and `cpb` and `busybox` (e2e/kind/run.sh makes it). The base
# is images/Dockerfile's, pinned by the same digest (packaging/tests/bundle_images.rs checks).
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
FROM ${RUNTIME_IMAGE}
COPY olm catalog opm /usr/local/bin/
# The util image of OLM's bundle unpack Job too (catalog-operator's --util-image): it runs
# `/bin/cp -Rv /bin/cpb /util/cpb` (busybox's cp, as in OLM's own image).
COPY cpb /bin/cpb
COPY busybox /bin/cp
USER 65532:65532
