#!/usr/bin/env bash
# The pod network of an offline kind cluster (what kindnetd does, which ships only as an image):
# each node gets a bridge CNI configuration for its own podCIDR (from cni.conflist here, so that
# a node image built earlier gets the current one) and a route to every other node's podCIDR
# through that node's address. No masquerading between pods: the Kubernetes network model has
# every pod see every other pod's own address (masqueraded, a pod's traffic to another node
# carried its node's address, which the initializer's per-peer cap then counted as one peer).
#
#   e2e/kind/offline/network.sh CLUSTER    # with KUBECONFIG pointing at the cluster
set -euo pipefail
cluster="${1:?usage: $0 CLUSTER}"
docker="${DOCKER:-docker}"
here="$(cd "$(dirname "$0")" && pwd)"

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
  sed "s#POD_SUBNET#${cidr[$node]}#" "$here/cni.conflist" \
    | "$docker" exec -i "$node" sh -c 'cat > /etc/cni/net.d/10-initializer-e2e.conflist'
  for other in "${nodes[@]}"; do
    [[ "$other" == "$node" ]] && continue
    "$docker" exec "$node" ip route replace "${cidr[$other]}" via "${address[$other]}"
  done
done
