#!/bin/bash
# In the guest: a kernel NVMe-over-Fabrics target (nvmet-rdma, over the
# guest's rxe) exporting a RAM-backed namespace, so that an NVMe-oF
# initiator can be tested against rxe:
#
#   nvmet.sh up [NQN] [SIZE_MB]    export on $IP:4420 (default 64 MiB)
#   nvmet.sh down [NQN]
#
# From another machine of the lab: nvme discover -t rdma -a 10.77.0.11 -s 4420,
# then nvme connect -t rdma -a 10.77.0.11 -s 4420 -n NQN.
set -euo pipefail
NQN=${2:-nqn.2026-12.org.example.roce-lab:ram0}
SIZE_MB=${3:-64}
IP=${IP:-$(ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1)}
CFG=/sys/kernel/config/nvmet
modprobe nvmet-rdma
# The guest has no udev: loading the module makes /dev/loop-control and the
# first loop devices (losetup --find finds none otherwise).
modprobe loop
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
SUB=$CFG/subsystems/$NQN
PORT=$CFG/ports/1

case "${1:-up}" in
up)
    # /tmp is tmpfs; a loop device turns the file into the block device nvmet exports.
    truncate -s "${SIZE_MB}M" "/tmp/$NQN.img"
    loop=$(losetup --find --show "/tmp/$NQN.img")
    mkdir -p "$SUB/namespaces/1"
    echo 1 > "$SUB/attr_allow_any_host"
    echo "$loop" > "$SUB/namespaces/1/device_path"
    echo 1 > "$SUB/namespaces/1/enable"
    if [ ! -d "$PORT" ]; then
        mkdir "$PORT"
        echo rdma > "$PORT/addr_trtype"
        echo ipv4 > "$PORT/addr_adrfam"
        echo "$IP" > "$PORT/addr_traddr"
        echo 4420 > "$PORT/addr_trsvcid"
    fi
    ln -sfn "$SUB" "$PORT/subsystems/$NQN"
    echo "nvmet: $NQN (${SIZE_MB} MiB on $loop) at rdma $IP:4420"
    ;;
down)
    rm -f "$PORT/subsystems/$NQN"
    loop=$(cat "$SUB/namespaces/1/device_path" 2>/dev/null || true)
    echo 0 > "$SUB/namespaces/1/enable" 2>/dev/null || true
    rmdir "$SUB/namespaces/1" "$SUB" 2>/dev/null || true
    if [ -d "$PORT" ] && [ -z "$(ls "$PORT/subsystems")" ]; then rmdir "$PORT"; fi
    if [ -n "$loop" ]; then losetup -d "$loop" || true; fi
    rm -f "/tmp/$NQN.img"
    ;;
*)
    echo "usage: $0 up|down [NQN] [SIZE_MB]" >&2
    exit 2
    ;;
esac
