# A local stand-in for gcr.io/distroless/cc-debian12 (images/Dockerfile's RUNTIME_IMAGE), for
# machines that cannot pull it: the files of the same Debian packages (libc6, libgcc-s1,
# libssl3, ca-certificates, tzdata, netbase, base-files), the nonroot user 65532, and no shell,
# no package manager.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE} AS packages
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates tzdata netbase libssl3 \
    && mkdir -p /rootfs/etc /rootfs/tmp /rootfs/home/nonroot /rootfs/usr/lib /rootfs/usr/lib64 \
    && ln -s usr/lib /rootfs/lib && ln -s usr/lib64 /rootfs/lib64 \
    && dpkg -L libc6 libgcc-s1 libssl3 ca-certificates tzdata netbase base-files \
      | while read -r path; do [ -f "$path" ] || [ -L "$path" ] && echo "$path"; done \
      | grep -v -E '^/(usr/share/(doc|man|lintian|locale)|usr/sbin|usr/bin|bin|sbin)/' \
      | tar -cf - -T - | tar -xf - -C /rootfs \
    && cp -a /etc/ssl /rootfs/etc/ \
    && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
    && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group \
    && chmod 1777 /rootfs/tmp && chown 65532:65532 /rootfs/home/nonroot

FROM scratch
COPY --from=packages /rootfs/ /
USER 65532:65532
