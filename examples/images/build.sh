#!/bin/sh
# Builds the three example layers (base → framework → app) on this node,
# without a registry: the base is a static busybox (Debian: busybox-static).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
gpufleet=${GPUFLEET:-gpufleet}
busybox=$(command -v busybox) || { echo "install busybox-static first (apt-get install busybox-static)" >&2; exit 1; }
cp "$busybox" "$here/base/busybox"
trap 'rm -f "$here/base/busybox"' EXIT
"$gpufleet" images build -t localhost/gpufleet-example/base:1 "$here/base"
"$gpufleet" images build -t localhost/gpufleet-example/framework:1 "$here/framework"
"$gpufleet" images build -t localhost/gpufleet-example/app:1 "$here/app"
