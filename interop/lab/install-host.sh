#!/bin/bash
# Installs what the lab needs on a Debian or Ubuntu host: qemu (x86-64 system
# emulator), debootstrap and e2fsprogs to build the guest image, iproute2 for
# the namespace and taps, tcpdump for captures, python3 (interop/run.sh uses
# it to turn off checksum offload on the bridge), and rdma-core's and
# perftest's tools, which interop/run.sh also runs on this host over the
# drop-in libibverbs (roce exec) against the same tools over rxe, and qperf and
# UCX's tools, which interop/middleware.sh runs the same way.
set -euo pipefail
. "$(dirname "$0")/lab.env"
need_root
export DEBIAN_FRONTEND=noninteractive
# Waits for another apt (e.g. unattended upgrades) instead of failing on its lock.
APT=(apt-get -o DPkg::Lock::Timeout=600)
"${APT[@]}" update -q
"${APT[@]}" install -y -q --no-install-recommends \
    qemu-system-x86 debootstrap e2fsprogs iproute2 tcpdump python3 ca-certificates \
    ibverbs-utils perftest rdmacm-utils qperf ucx-utils
qemu-system-x86_64 --version | head -n 1
