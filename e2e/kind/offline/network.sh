#!/usr/bin/env bash
# The pod network of an offline kind cluster (what kindnetd does, which ships only as an image):
# each node gets a bridge CNI configuration for its own podCIDR (the template node.Dockerfile
# installs) and a route to every other node's podCIDR through that node's address.
#
#   e2e/kind/offline/network.sh CLUSTER    # with KUBECONFIG pointing at the cluster
set -euo pipefail
cluster="${1:?usage: $0 CLUSTER}"
docker="${DOCKER:-docker}"
template=/etc/cni/net.d/10-initializer-e2e.conflist.template

mapfile -t nodes < <("$docker" ps --filter "label=io.x-k8s.kind.cluster=$cluster" --format '{{.Names}}' | sort)
((${#nodes[@]})) || { echo "network: no node of cluster $cluster is running" >&2; exit 1; }
declare -A cidr address
for node in "${nodes[@]}"; do
  cidr[$node]="$(kubectl get node "$node" -o jsonpath='{.spec.podCIDR}')"
  address[$node]="$("$docker" inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$node")"
  [[ -n "${cidr[$node]}" && -n "${address[$node]}" ]] \
    || { echo "network: node $node has no podCIDR or address yet" >&2; exit 1; }
done
for node in "${nodes[@]}"; do
  "$docker" exec "$node" sh -c \
    "sed 's#POD_SUBNET#${cidr[$node]}#' $template > /etc/cni/net.d/10-initializer-e2e.conflist"
  for other in "${nodes[@]}"; do
    [[ "$other" == "$node" ]] && continue
    "$docker" exec "$node" ip route replace "${cidr[$other]}" via "${address[$other]}"
  done
done
