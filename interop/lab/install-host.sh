#!/bin/bash
# Installs what the lab needs on a Debian or Ubuntu host: qemu (x86-64 system
# emulator), debootstrap and e2fsprogs to build the guest image, iproute2 for
# the namespace and taps, tcpdump for captures, python3 (interop/run.sh uses
# it to turn off checksum offload on the bridge).
set -euo pipefail
. "$(dirname "$0")/lab.env"
need_root
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
    qemu-system-x86 debootstrap e2fsprogs iproute2 tcpdump python3 ca-certificates
qemu-system-x86_64 --version | head -n 1
