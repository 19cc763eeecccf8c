#!/bin/bash
# An rxe peer for interop tests: one lab VM, booted once and then driven
# command by command from the host.
#
#   peer.sh start [NAME]        boot NAME (vmA: 10.77.0.11 on tap0; vmB: .12 on
#                               tap1) and wait until its rxe device is up;
#                               prints DEV, GIDX and IP of the guest
#   peer.sh exec NAME 'CMD'     run CMD (bash) in the guest, print its output,
#                               exit with its status; gives up after $TIMEOUT s
#   peer.sh bg NAME 'CMD'       start CMD in the guest, print a job id at once
#   peer.sh wait NAME ID        wait for job ID, print its output, exit with its status
#   peer.sh stop NAME           power the VM off (prints rxe's counters)
#   peer.sh selftest [NAME]     ibv_rc_pingpong and rping over the guest's own rxe
#   peer.sh status [NAME]       running or not
#
# KERNEL=VERSION (or a prefix: KERNEL=6.12) boots $LAB/images/vmlinuz-VERSION
# instead of the default kernel (build-image.sh EXTRA_KERNEL=backports adds
# one); the guest's `uname -r` says which one runs.
#
# In CMD, $DEV is the guest's rxe device (rxe0) and $GIDX the index of its
# RoCE v2 GID for its IPv4 address (for -g / -x). The host's side of the lab
# is 10.77.0.1 in netns rxelab (net.sh): run the program under test there.
#
# How it works: each VM gets a directory $LAB/run/NAME, shared with the
# guest over 9p (mounted at /lab). The host drops a job file into jobs/; the
# guest's init (guest/init) runs it and leaves its output and exit status
# next to it. The VM boots the image with snapshot=on, so nothing it does
# persists.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lab.env"
TIMEOUT=${TIMEOUT:-300}

cmd=${1:-}
[ $# -gt 0 ] && shift
NAME=${1:-vmA}
vm_index "$NAME" >/dev/null || die "unknown VM '$NAME' (vmA, vmB, vm0..vm9)"
RUN=$LAB/run/$NAME
JOBS=$RUN/jobs

# until_exists FILE SECONDS: waits for FILE; false on timeout.
until_exists() {
    local deadline=$((SECONDS + $2))
    while [ ! -e "$1" ]; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}
qemu_pid() { cat "$RUN/qemu.pid" 2>/dev/null; }
running() { local p; p=$(qemu_pid) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# result ID: prints a finished job's output, exits with its status.
result() {
    if ! until_exists "$JOBS/$1.status" "$TIMEOUT"; then
        echo "peer.sh: job $1 still running after ${TIMEOUT}s" >&2
        cat "$JOBS/$1.log" 2>/dev/null || true
        exit 124
    fi
    cat "$JOBS/$1.log"
    exit "$(cat "$JOBS/$1.status")"
}

# submit CMD: queues CMD as a job (written aside, then renamed, so the guest
# never sees half a file); prints its id.
submit() {
    local id
    id=$(date +%s%N)
    printf '%s\n' "$1" > "$JOBS/.$id.tmp"
    mv "$JOBS/.$id.tmp" "$JOBS/$id.job"
    echo "$id"
}

case "$cmd" in
start)
    need_root
    [ -f "$LAB/images/rootfs.img" ] || die "no image: run build-image.sh first"
    if running; then cat "$RUN/ready"; exit 0; fi
    bash "$HERE/net.sh" up
    kernel=$LAB/images/vmlinuz initrd=$LAB/images/initrd.img
    if [ -n "${KERNEL:-}" ]; then
        kernel=$(find "$LAB/images" -name "vmlinuz-$KERNEL*" | sort -V | tail -n 1)
        [ -n "$kernel" ] || die "no kernel $KERNEL in $LAB/images (build-image.sh EXTRA_KERNEL=backports)"
        initrd=$LAB/images/initrd.img-${kernel##*/vmlinuz-}
    fi
    rm -rf "$RUN"
    mkdir -p "$JOBS"
    # shellcheck disable=SC2054 # qemu's option values contain commas
    accel=(-accel tcg,thread=multi -cpu max)
    [ "$ACCEL" = kvm ] && accel=(-accel kvm -cpu host)
    # setsid: the VM outlives this script; its pid goes to qemu.pid.
    ip netns exec "$NS" setsid qemu-system-x86_64 "${accel[@]}" -m "$MEM" -smp "$SMP" \
        -nodefaults -display none -no-reboot -monitor none \
        -serial "file:$RUN/console.log" \
        -kernel "$kernel" -initrd "$initrd" \
        -append "root=/dev/vda rw console=ttyS0 quiet init=/sbin/lab-init net.ifnames=0 lab.name=$NAME lab.ip=$(vm_ip "$NAME")/24" \
        -drive "file=$LAB/images/rootfs.img,format=raw,if=virtio,snapshot=on" \
        -virtfs "local,path=$RUN,mount_tag=lab,security_model=none,id=lab" \
        -netdev "tap,id=n0,ifname=$(vm_tap "$NAME"),script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=$(vm_mac "$NAME")" \
        -pidfile "$RUN/qemu.pid" </dev/null >"$RUN/qemu.log" 2>&1 &
    # An emulated CPU boots in 15-90 s; a qemu that exits (e.g. ACCEL=kvm where
    # KVM refuses the CPU model) ends the wait at once.
    deadline=$((SECONDS + 240))
    while [ ! -e "$RUN/ready" ]; do
        if [ "$SECONDS" -ge "$deadline" ] || { [ "$SECONDS" -gt 5 ] && ! running && sleep 1 && [ ! -e "$RUN/ready" ]; }; then
            echo "peer.sh: $NAME did not come up; qemu's messages and the end of its console:" >&2
            cat "$RUN/qemu.log" >&2 2>/dev/null || true
            tail -n 20 "$RUN/console.log" >&2 2>/dev/null || true
            exit 1
        fi
        sleep 0.2
    done
    cat "$RUN/ready"
    ;;
exec)
    running || die "$NAME is not running (peer.sh start $NAME)"
    result "$(submit "${2:?the command}")"
    ;;
bg)
    running || die "$NAME is not running (peer.sh start $NAME)"
    id=$(submit "${2:?the command}")
    touch "$JOBS/$id.background"
    echo "$id"
    ;;
wait)
    result "${2:?a job id}"
    ;;
stop)
    [ -d "$RUN" ] || exit 0
    touch "$RUN/stop"
    for _ in $(seq 60); do running || break; sleep 0.5; done
    if running; then kill "$(qemu_pid)"; fi
    cat "$RUN/counters" 2>/dev/null || true
    ;;
selftest)
    # A server and a client in the guest over its own rxe device ($DEV,
    # $GIDX and $IP expand in the guest, hence the single quotes).
    # shellcheck disable=SC2016
    "$0" exec "$NAME" 'ibv_rc_pingpong -d $DEV -g $GIDX -n 100 & sleep 2; ibv_rc_pingpong -d $DEV -g $GIDX -n 100 127.0.0.1; wait'
    # shellcheck disable=SC2016
    "$0" exec "$NAME" 'rping -s -a $IP -C 3 & sleep 2; rping -c -a $IP -C 3 -v; wait'
    ;;
status)
    if running; then echo "$NAME running (pid $(qemu_pid))"; else echo "$NAME stopped"; exit 1; fi
    ;;
*)
    sed -n '2,30p' "$0"
    exit 2
    ;;
esac
