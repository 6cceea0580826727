# OLM's image for the kind suite: `olm`, `catalog` and `opm`, the binaries tools/olm/build.sh
# builds from their Go modules (the same ones the real control plane's OLM scenarios run as
# processes), on the runtime every image of ours uses (opm links glibc: its sqlite is cgo).
# The build context is a folder holding the three binaries (e2e/kind/run.sh makes it).
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
FROM ${RUNTIME_IMAGE}
COPY olm catalog opm /usr/local/bin/
USER 65532:65532
