#!/usr/bin/env bash
# Builds the binaries of a real Kubernetes control plane for gpufleet's
# Kubernetes integration tests, once per machine, and prints the folder that
# holds them. Sources: the Go module proxy only (see
# ../../docs/kubernetes.md#tests). The folder is
# $HOME/.cache/gpufleet/kube-<hash of both go.sums and this script>/, so a change
# of version builds afresh and an unchanged one is reused. A cold build takes
# about 11 minutes on 2 cores (GOCACHE grows by ~4.4 GB).
# Usage: build.sh [--cached]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
KUBE_VERSION=v1.37.2

key=$(cat "$here/go.sum" "$here/etcd/go.sum" "$here/build.sh" | sha256sum | cut -c1-16)
cache="${GPUFLEET_CACHE:-$HOME/.cache/gpufleet}"
dest="$cache/kube-$key"
bins=(kube-apiserver kube-scheduler kube-controller-manager etcd kwok)
complete() {
  for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
  [ -d "$dest/stages" ]
}
if complete; then echo "$dest"; exit 0; fi
# --cached: only say where a complete cache folder is (exit 3 when there is
# none); internal/kubetest uses it to skip rather than start a cold build.
if [ "${1:-}" = "--cached" ]; then exit 3; fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.kube-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0
start=$(date +%s)
>&2 echo "building Kubernetes $KUBE_VERSION control plane into $dest (cold build: about 11 minutes)"
(cd "$here" && go build -trimpath -ldflags "-s -w \
  -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
  -X k8s.io/component-base/version.gitMajor=1 \
  -X k8s.io/component-base/version.gitMinor=37" \
  -o "$work/bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager) >&2
>&2 echo "etcd $ETCD_VERSION"
grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION\$" "$here/etcd/go.mod" || { >&2 echo "etcd/go.mod does not require etcd $ETCD_VERSION"; exit 1; }
# Not `go install …@version`: etcd's go.mod has replace directives, which
# go install refuses; etcd/go.mod pins $ETCD_VERSION instead.
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$work/bin/etcd" go.etcd.io/etcd/server/v3) >&2
>&2 echo "kwok $KWOK_VERSION"
GOBIN="$work/bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
# KWOK's stage definitions (node heartbeat, pod lifecycle) ship in its module.
modsrc="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
mkdir -p "$work/stages" && cp -r "$modsrc"/. "$work/stages/" && chmod -R u+w "$work/stages"
rm -rf "$dest" && mv "$work" "$dest"
trap - EXIT
>&2 echo "built in $(( $(date +%s) - start ))s"
echo "$dest"
