#!/bin/bash
# Builds the guest: a Debian root file system with the kernel's Soft-RoCE
# driver (rdma_rxe ships in Debian's kernel), rdma-core, perftest,
# rdmacm-utils, and applications that run over RDMA (nvme-cli with the
# kernel's nvme-rdma/nvmet-rdma, fio, UCX, libfabric, qperf), then an ext4
# image of it and the kernel and initrd to boot it with.
#
#   $LAB/rootfs/            the tree (kept: a second run only updates it)
#   $LAB/images/rootfs.img  the ext4 image (VMs boot it with snapshot=on)
#   $LAB/images/vmlinuz, initrd.img
#
# Variables: LAB, SUITE (bookworm), MIRROR (default: this host's first
# Debian mirror, else deb.debian.org), IMAGE_SIZE (3G), EXTRA_PACKAGES
# (more Debian packages for the guest, e.g. linux-perf to profile in it),
# EXTRA_KERNEL (a second kernel beside the suite's: "backports" installs
# $SUITE-backports' linux-image-amd64, 6.12 for bookworm). Every kernel of
# the tree is copied as vmlinuz-VERSION / initrd.img-VERSION; vmlinuz and
# initrd.img stay the suite's own (the oldest), and peer.sh boots another
# with KERNEL=VERSION (or a prefix of it: KERNEL=6.12).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lab.env"
need_root

guess_mirror() {
    local m
    m=$(grep -hsE '^(deb |URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
        | grep -v security | grep -oE 'https?://[^ ]+' | head -n 1 || true)
    case "$m" in *debian*) echo "$m" ;; *) echo http://deb.debian.org/debian ;; esac
}
MIRROR=${MIRROR:-$(guess_mirror)}
ROOT=$LAB/rootfs
BASE=linux-image-amd64,kmod,iproute2,procps,iputils-ping,ethtool,tcpdump,ca-certificates
TOOLS="rdma-core ibverbs-utils ibverbs-providers infiniband-diags perftest rdmacm-utils"
APPS="nvme-cli fio ucx-utils libfabric-bin qperf ${EXTRA_PACKAGES:-}"
mkdir -p "$LAB/images"
step() { echo "[build-image $(date +%T)] $*"; }

if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    step "debootstrap $SUITE from $MIRROR"
    debootstrap --variant=minbase --include="$BASE" "$SUITE" "$ROOT" "$MIRROR"
fi

# Packages go in through apt inside the tree, so dependencies are resolved
# as on any Debian system; no service may start in the chroot.
step "installing $TOOLS $APPS"
printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
mount --bind /proc "$ROOT/proc"
trap 'umount "$ROOT/proc" 2>/dev/null || true' EXIT
# shellcheck disable=SC2086 # word splitting of the package lists is meant
chroot "$ROOT" sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends $TOOLS $APPS && apt-get clean"
if [ "${EXTRA_KERNEL:-}" = backports ]; then
    step "installing linux-image-amd64 from $SUITE-backports"
    echo "deb $MIRROR $SUITE-backports main" > "$ROOT/etc/apt/sources.list.d/backports.list"
    chroot "$ROOT" sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends -t $SUITE-backports linux-image-amd64 && apt-get clean"
fi
umount "$ROOT/proc"
trap - EXIT
rm -f "$ROOT/usr/sbin/policy-rc.d"

step "guest files"
install -m 0755 "$HERE/guest/init" "$ROOT/sbin/lab-init"
install -m 0755 "$HERE/guest/nvmet.sh" "$ROOT/usr/local/sbin/nvmet.sh"
echo rxelab > "$ROOT/etc/hostname"
echo '/dev/vda / ext4 rw,noatime 0 1' > "$ROOT/etc/fstab"
mkdir -p "$ROOT/etc/security/limits.d"
echo '* - memlock unlimited' > "$ROOT/etc/security/limits.d/rdma.conf"

step "kernel and image"
kernels=$(find "$ROOT/boot" -name 'vmlinuz-*' | sort -V)
[ -n "$kernels" ] || die "no kernel in $ROOT/boot"
for kernel in $kernels; do
    v=${kernel##*/vmlinuz-}
    cp -f "$kernel" "$LAB/images/vmlinuz-$v"
    cp -f "$ROOT/boot/initrd.img-$v" "$LAB/images/initrd.img-$v"
done
# The default: the suite's own kernel, the oldest of the tree.
version=$(echo "$kernels" | head -n 1); version=${version##*/vmlinuz-}
cp -f "$LAB/images/vmlinuz-$version" "$LAB/images/vmlinuz"
cp -f "$LAB/images/initrd.img-$version" "$LAB/images/initrd.img"
echo "$version" > "$LAB/images/kernel-version"
rm -f "$LAB/images/rootfs.img"
mkfs.ext4 -q -F -L rxelab -d "$ROOT" "$LAB/images/rootfs.img" "$IMAGE_SIZE"
step "done: kernels $(echo "$kernels" | sed 's|.*/vmlinuz-||' | tr '\n' ' ')(default $version), $(du -h "$LAB/images/rootfs.img" | cut -f1) image in $LAB/images"
