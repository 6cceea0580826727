# The kind node image, assembled offline (e2e/kind/offline/images.sh) when kindest/node cannot
# be pulled: kind's own base files (images/base/files of the kind module, copied into the
# build context by images.sh) on a local Debian base, with Debian's systemd, containerd, runc and
# CNI plugins. The Kubernetes binaries and the control plane's images are added afterwards, as
# `kind build node-image` does (a container, `ctr images import`, `docker commit`).
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ARG PAUSE_IMAGE
# runc-without-sys-resource when the building machine lacks CAP_SYS_RESOURCE (see the script).
ARG RUNC_BINARY=/usr/sbin/runc

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      systemd containerd runc containernetworking-plugins \
      conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz \
      e2fsprogs bash ca-certificates curl jq procps \
    && rm -rf /var/lib/apt/lists/* /var/cache/debconf/* /var/log/*
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY runc-without-sys-resource /usr/local/sbin/runc-without-sys-resource
COPY cni.conflist /etc/cni/net.d/10-initializer-e2e.conflist.template
RUN chmod 0755 /usr/local/bin/* /kind /kind/bin /kind/bin/* /usr/local/sbin/runc-without-sys-resource \
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
    && ln -sf /usr/lib/systemd/systemd /sbin/init \
    && ln -sf /usr/bin/containerd /usr/local/bin/containerd \
    && mkdir -p /opt/cni && ln -sfn /usr/lib/cni /opt/cni/bin \
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
    && systemctl mask systemd-binfmt.service \
    && mkdir -p /etc/kubernetes/manifests \
    && ctr oci spec \
      | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
    && sed -i -e "s#sandbox_image = .*#sandbox_image = \"${PAUSE_IMAGE}\"#" \
      -e "s#^    SystemdCgroup = true#    SystemdCgroup = true\n    BinaryName = \"${RUNC_BINARY}\"#" \
      /etc/containerd/config.toml
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
