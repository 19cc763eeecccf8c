#!/bin/bash
# shellcheck disable=SC2016,SC2086 # guest commands expand in the guest; $TARGET_OPTS is words
# NVMe over Fabrics (RDMA) against Linux in the lab (interop/lab): the kernel's nvme-rdma host
# in the VM against `roce nvmf target` on the host side, and `roce nvmf` as the host against
# the kernel's nvmet-rdma in the VM. One row per case; exit 0 only when every case passed.
#
#   bash interop/nvmf.sh                          # both directions on the default kernel
#   KERNELS="default 6.12" bash interop/nvmf.sh   # again on a second kernel (build-image.sh
#                                                 # EXTRA_KERNEL=backports; peer.sh KERNEL=)
#   DIRECTIONS=linux-pair bash interop/nvmf.sh    # the loss case between two Linux VMs
#
# Linux's host against our target (`roce nvmf target --mem`, NS_MB MiB in blocks of 4 KiB, in
# netns rxelab on HOST_IP:4420):
#   discover     nvme discover -t rdma -a HOST_IP -s 4420 lists the subsystem
#   connect      nvme connect -t rdma -n NQN ...; the namespace's block device appears
#   fs           mkfs.ext4, mount, FILES files of FILE_MB MiB from /dev/urandom, their sha256,
#                sync, umount, nvme disconnect
#   reconnect    nvme connect again, mount, every sha256 identical, umount
#   fio-verify   fio randrw 4 KiB, iodepth 16, libaio direct, FIO_MB MiB, --verify=crc32c
#                (verify_fatal), then nvme disconnect
#   loss-fio     LOSS % netem loss both ways on the guest's eth0 (egress, and ingress through
#                an ifb device: below rxe, outside both stacks), connect, the same fio,
#                disconnect, netem removed. Fails on 6.1 and 6.12 through a defect of rxe:
#                when its requester retransmits, it executes again the REG_MR work requests
#                it had already executed (rxe_req.c: req_retry() rewinds to the oldest
#                unacknowledged request and leaves done ones as they are, rxe_requester()
#                runs a local operation whatever its state), rxe_reg_fast_mr() refuses an
#                MR that is not free ("mr->lkey = ... not free": printed by 6.1, a dynamic
#                debug message in 6.12, which this case turns on), and the QP goes to the
#                error state. The row counts those messages; docs/interop.md has the details.
#   capture      tcpdump on the VM's tap for the whole direction; `roce inspect`: every
#                ICRC valid, capsules decoded (CM request, Connect, Identify, Read, Write,
#                and completions)
# Our host against Linux's target (the guest's nvmet.sh: a RAM-backed loop device of
# THEIR_MB MiB, port rdma PEER_IP:4420):
#   discover     roce nvmf discover lists the subsystem
#   check        roce nvmf check --blocks CHECK_BLOCKS (identify, write, read back, compare)
#   perf         roce nvmf perf --rw randread, then randwrite, PERF_TIME s each, no failure
#   capture      as above, on this direction's traffic
# Linux's host against Linux's target (DIRECTIONS=linux-pair, not run by default: the reference
# for the loss case): vmB (PEER_B, PEER_B_IP) runs nvmet.sh, vmA the same netem, fio and
# judgement as loss-fio above against it.
#
# Variables (defaults in brackets):
#   LAB_DIR [interop/lab]  PEER [vmA]  NS [rxelab]  HOST_IP [10.77.0.1]  PEER_IP [10.77.0.11]
#   CAP_IF [tap0]  ROCE [target/release/roce]  OUT [/tmp/nvmf-DATE]
#   KERNELS [default]: kernels to boot the VM with, in turn (peer.sh KERNEL=; "default" is
#               the image's own); a VM already running the kernel wanted is used as it is
#   DIRECTIONS [linux-host linux-target]  NQN [nqn.2026-12.org.example:roce-target]
#   THEIR_NQN [nqn.2026-12.org.example.roce-lab:ram0]  NS_MB [256]  THEIR_MB [64]
#   FILES [4]  FILE_MB [4]  FIO_MB [8]  FIO_TIME [120] s at most per fio run  LOSS [1] %
#   CHECK_BLOCKS [256]  PERF_TIME [5]  STEP_TIMEOUT [300] s per step  CAPTURE_PACKETS [400000]
#   TARGET_OPTS ['']: more flags for `roce nvmf target` (e.g. --no-remote-invalidate)
#   NVME_RDMA_OPTS ['']: options for the guest's nvme-rdma module, reloaded with them (e.g.
#               register_always=N: single-segment I/O through the PD's global rkey, no REG_MR)
#   PEER_B [vmB]  PEER_B_IP [10.77.0.12]: the target VM of linux-pair
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$HERE/lab}
PEER=${PEER:-vmA}
NS=${NS:-rxelab}
HOST_IP=${HOST_IP:-10.77.0.1}
PEER_IP=${PEER_IP:-10.77.0.11}
CAP_IF=${CAP_IF:-tap0}
ROCE=${ROCE:-$HERE/../target/release/roce}
OUT=${OUT:-/tmp/nvmf-$(date +%Y%m%d-%H%M%S)}
KERNELS=${KERNELS:-default}
DIRECTIONS=${DIRECTIONS:-linux-host linux-target}
NQN=${NQN:-nqn.2026-12.org.example:roce-target}
THEIR_NQN=${THEIR_NQN:-nqn.2026-12.org.example.roce-lab:ram0}
NS_MB=${NS_MB:-256}
THEIR_MB=${THEIR_MB:-64}
FILES=${FILES:-4}
FILE_MB=${FILE_MB:-4}
FIO_MB=${FIO_MB:-8}
FIO_TIME=${FIO_TIME:-120}
LOSS=${LOSS:-1}
CHECK_BLOCKS=${CHECK_BLOCKS:-256}
PERF_TIME=${PERF_TIME:-5}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
CAPTURE_PACKETS=${CAPTURE_PACKETS:-400000}
TARGET_OPTS=${TARGET_OPTS:-}
NVME_RDMA_OPTS=${NVME_RDMA_OPTS:-}
PEER_B=${PEER_B:-vmB}
PEER_B_IP=${PEER_B_IP:-10.77.0.12}

mkdir -p "$OUT"
ROCE=$(readlink -f "$ROCE")
[ -x "$ROCE" ] || { echo "no roce binary at $ROCE (cargo build --release -p roce-cli)" >&2; exit 2; }

nsx() { ip netns exec "$NS" "$@"; }

STARTED_PEER=0
STARTED_PEER_B=0
BG_PIDS=()   # process groups (setsid) of ours: the target, tcpdump
cleanup() {
    for p in "${BG_PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
    sleep 0.5
    for p in "${BG_PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
    if [ "$STARTED_PEER" = 1 ]; then
        bash "$LAB_DIR/peer.sh" stop "$PEER" >/dev/null 2>&1
    fi
    if [ "$STARTED_PEER_B" = 1 ]; then
        bash "$LAB_DIR/peer.sh" stop "$PEER_B" >/dev/null 2>&1
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

peer_run() { TIMEOUT=${2:-$STEP_TIMEOUT} bash "$LAB_DIR/peer.sh" exec "$PEER" "$1"; }

# bg_start LOG CMD...: CMD in the netns, in a process group of its own; sets bg.
bg_start() {
    local log=$1; shift
    setsid ip netns exec "$NS" "$@" >"$log" 2>&1 &
    bg=$!; BG_PIDS+=("$bg")
}
# bg_stop PID: ends that process group (TERM, then KILL after 5 s).
bg_stop() {
    kill -TERM -- "-$1" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

FAILS=0
N=0
row() { printf '%-8s %-13s %-13s %-5s %s\n' "$@" | tee -a "$OUT/results.txt"; }
# result KERNEL DIRECTION CASE STATUS NOTE: one row, counted.
result() {
    N=$((N + 1))
    local r=PASS
    [ "$4" -eq 0 ] || { r=FAIL; FAILS=$((FAILS + 1)); }
    row "$1" "$2" "$3" "$r" "$5"
}

# capture_start DIR / capture_check DIR: tcpdump on the VM's tap, then `roce inspect`: every
# ICRC valid and each WANT pattern among the decoded capsules; sets cap_rc and cap_note.
capture_start() {
    bg_start "$1/tcpdump.log" tcpdump -i "$CAP_IF" -s 0 -U -c "$CAPTURE_PACKETS" -w "$1/capture.pcap" udp port 4791
    cap=$bg
    sleep 1
}
capture_check() {
    local dir=$1; shift
    sleep 0.5; bg_stop "$cap"
    "$ROCE" inspect "$dir/capture.pcap" >"$dir/inspect.txt" 2>&1; cap_rc=$?
    "$ROCE" inspect --summary "$dir/capture.pcap" >"$dir/summary.txt" 2>&1 || cap_rc=$?
    local pkts bad missing=""
    pkts=$(grep -c 'icrc=' "$dir/inspect.txt")
    bad=$(grep -c 'icrc=BAD' "$dir/inspect.txt")
    for w in "$@"; do grep -qE "$w" "$dir/inspect.txt" || missing="$missing [$w]"; done
    cap_note="$pkts packets, $bad bad ICRC, $(grep -c 'NVMe-oF' "$dir/inspect.txt") capsules decoded$([ -n "$missing" ] && echo ", missing:$missing")"
    [ "$pkts" -gt 0 ] && [ "$bad" -eq 0 ] && [ -z "$missing" ] || cap_rc=1
    if [ "$cap_rc" -ne 0 ]; then cap_note="$cap_note; $(grep -m1 -oE 'roce inspect: .*' "$dir/summary.txt")"; fi
}

# In the guest: the block device of the namespace of subsystem $1 (waits 30 s at most).
GUEST_NSDEV='nsdev() {
    for _ in $(seq 150); do
        for b in /sys/block/nvme*n*; do
            [ -e "$b" ] || continue
            if [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$1" ] || [ "$(cat "$b/device/device/subsysnqn" 2>/dev/null)" = "$1" ]; then
                [ -b "/dev/${b##*/}" ] && { echo "/dev/${b##*/}"; return 0; }
            fi
        done
        sleep 0.2
    done
    return 1
}'
# In the guest: LOSS % netem loss on eth0 both ways, below rxe (outside both stacks): egress on
# eth0, ingress through ifb0 (the host's kernel in the lab may lack netem).
GUEST_LOSS='loss_on() {
    modprobe ifb numifbs=0; ip link add ifb0 type ifb 2>/dev/null; ip link set ifb0 up
    tc qdisc add dev eth0 handle ffff: ingress
    tc filter add dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0
    tc qdisc add dev ifb0 root netem loss "$1%"; tc qdisc add dev eth0 root netem loss "$1%"
}
loss_off() { tc qdisc del dev eth0 root 2>/dev/null; tc qdisc del dev eth0 ingress 2>/dev/null; ip link del ifb0 2>/dev/null; true; }
# rxe'"'"'s refusals of a fast registration or an invalidation: 6.1 prints them (pr_warn), 6.12
# only as dynamic debug messages (rxe_dbg_mr), turned on here.
rxe_dbg_on() {
    mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
    for f in rxe_reg_fast_mr rxe_invalidate_mr; do
        echo "module rdma_rxe func $f +p" > /sys/kernel/debug/dynamic_debug/control 2>/dev/null
    done; true
}
# Times the requester of the guest'"'"'s rxe went back to retransmit (timeout or NAK), since boot.
retries() { cat /sys/class/infiniband/*/ports/1/hw_counters/completer_retry_err 2>/dev/null | head -n 1; }'
# The nvme-rdma module, with NVME_RDMA_OPTS when there are any (reloaded so that they apply).
GUEST_MODPROBE="modprobe nvme-rdma"
[ -n "$NVME_RDMA_OPTS" ] && GUEST_MODPROBE="{ modprobe -r nvme_rdma 2>/dev/null; modprobe nvme-rdma $NVME_RDMA_OPTS; }"
FIO="fio --name=verify --rw=randrw --bs=4k --iodepth=16 --ioengine=libaio --direct=1 --size=${FIO_MB}m \
--verify=crc32c --do_verify=1 --verify_fatal=1 --runtime=$FIO_TIME --randrepeat=0"

# loss_case KERNEL DIRECTION DIR CONNECT NQN: in the guest $PEER, netem loss, connect, fio,
# disconnect, netem off; one row. The data must verify, and no request may have needed the host's
# 30 s timeout or an error recovery. The row names rxe's refusals when there are any.
loss_case() {
    local k=$1 dir=$2 d=$3 connect=$4 nqn=$5 rc
    peer_run "$GUEST_LOSS; $GUEST_NSDEV; dmesg -C; rxe_dbg_on; retries > /tmp/retries0; loss_on $LOSS; set -e; $connect; dev=\$(nsdev $nqn)
        $FIO --filename=\$dev; nvme disconnect -n $nqn; tc -s qdisc show dev eth0; tc -s qdisc show dev ifb0; loss_off" \
        $((FIO_TIME + 180)) >"$d/loss.log" 2>&1; rc=$?
    grep -qE 'verify: bad|err= *[1-9]' "$d/loss.log" && rc=1
    peer_run "$GUEST_LOSS; loss_off; nvme disconnect -n $nqn 2>/dev/null; echo retries=\$((\$(retries) - \$(cat /tmp/retries0)))" 60 \
        >"$d/retries.log" 2>&1
    # Data verified is not enough: a request the host had to time out (30 s, then a reconnect)
    # fails the case too.
    peer_run 'dmesg -c' 60 >"$d/dmesg-loss.log" 2>&1
    local tmo recov notfree retries why=""
    tmo=$(grep -cE 'QID [0-9]+ timeout' "$d/dmesg-loss.log")
    recov=$(grep -c 'starting error recovery' "$d/dmesg-loss.log")
    notfree=$(grep -c 'rxe_reg_fast_mr.* not free' "$d/dmesg-loss.log")
    retries=$(grep -m1 -oE 'retries=[0-9]+' "$d/retries.log" | cut -d= -f2)
    [ "$tmo" -eq 0 ] && [ "$recov" -eq 0 ] || rc=1
    [ "$notfree" -gt 0 ] && why="; rxe refused $notfree fast registrations ('not free'): its retransmission executes REG_MR again (rxe defect, docs/interop.md 'NVMe-oF at 1 % loss')"
    # A connect that failed (e.g. 6.1's host sends no Keep Alive while it sets up its I/O
    # queues: slowed by loss past KATO, the controller is gone when they connect).
    if grep -q 'could not add new controller' "$d/loss.log"; then
        why="$why; nvme connect failed: $(grep -m1 -oE 'nvme[0-9]+: (Connect|failed to connect).*' "$d/dmesg-loss.log")"
    fi
    result "$k" "$dir" "loss-fio" "$rc" "$LOSS % both ways ($(grep -oE 'dropped [0-9]+' "$d/loss.log" | awk '{s += $2} END {print s + 0}') dropped); $(grep -m2 -oE '(read|write): IOPS=[^,]+' "$d/loss.log" | tr '\n' ' ')in $(grep -m1 -oE 'run=[0-9]+' "$d/loss.log" | cut -d= -f2) ms; ${retries:-?} retransmissions of the host's rxe; $tmo I/O timeouts, $recov error recoveries$why"
}

# --- Linux's host against our target --------------------------------------------------------
linux_host() {
    local k=$1 d="$OUT/$1/linux-host" rc
    mkdir -p "$d"
    local connect="nvme connect -t rdma -n $NQN -a $HOST_IP -s 4420"
    capture_start "$d"
    bg_start "$d/target.log" timeout $((STEP_TIMEOUT * 8)) "$ROCE" nvmf target --bind "$HOST_IP" \
        --nqn "$NQN" --mem $((NS_MB * 256)) --block-size 4096 $TARGET_OPTS
    local tgt=$bg
    sleep 2

    # Without the module nvme-cli finds no /dev/nvme-fabrics (6.12 loads nothing by itself).
    peer_run "$GUEST_MODPROBE && nvme discover -t rdma -a $HOST_IP -s 4420" >"$d/discover.log" 2>&1; rc=$?
    grep -q "subnqn: *$NQN" "$d/discover.log" || rc=1
    result "$k" linux-host discover "$rc" "$(grep -c 'Discovery Log Entry' "$d/discover.log") entries"

    peer_run "$GUEST_NSDEV; $connect && nsdev $NQN && nvme list" >"$d/connect.log" 2>&1; rc=$?
    result "$k" linux-host connect "$rc" "$(grep -m1 -oE '/dev/nvme[0-9]+n[0-9]+' "$d/connect.log")"

    peer_run "$GUEST_NSDEV; set -e; dev=\$(nsdev $NQN); mkfs.ext4 -q -F \$dev; mkdir -p /mnt/nv; mount \$dev /mnt/nv
        for i in \$(seq $FILES); do head -c ${FILE_MB}M /dev/urandom > /mnt/nv/f\$i; done
        (cd /mnt/nv && sha256sum f* > /tmp/sums); cat /tmp/sums; sync; umount /mnt/nv; nvme disconnect -n $NQN" \
        >"$d/fs.log" 2>&1; rc=$?
    result "$k" linux-host fs "$rc" "mkfs.ext4, $FILES x $FILE_MB MiB written, disconnect"

    peer_run "$GUEST_NSDEV; set -e; $connect; dev=\$(nsdev $NQN); mount \$dev /mnt/nv
        (cd /mnt/nv && sha256sum -c /tmp/sums); umount /mnt/nv" >"$d/reconnect.log" 2>&1; rc=$?
    result "$k" linux-host reconnect "$rc" "$(grep -c ': OK' "$d/reconnect.log")/$FILES sha256 identical"

    peer_run "$GUEST_NSDEV; set -e; dev=\$(nsdev $NQN); $FIO --filename=\$dev; nvme disconnect -n $NQN" \
        $((FIO_TIME + 120)) >"$d/fio.log" 2>&1; rc=$?
    grep -qE 'verify|err= *[1-9]' "$d/fio.log" && grep -qE 'verify: bad|err= *[1-9]' "$d/fio.log" && rc=1
    result "$k" linux-host fio-verify "$rc" "$(grep -m2 -oE '(read|write): IOPS=[^,]+' "$d/fio.log" | tr '\n' ' ')"

    loss_case "$k" linux-host "$d" "$connect" "$NQN"

    bg_stop "$tgt"
    peer_run 'dmesg -c' 60 >"$d/dmesg.log" 2>&1
    capture_check "$d" 'CM request qid=0' 'Connect cid=[0-9]+ qid=0' 'Identify' 'Read cid' 'Write cid' 'Keep Alive|Set Features' 'status=|Success|success'
    result "$k" linux-host capture "$cap_rc" "$cap_note"
}

# --- Linux's host against Linux's target (the loss case's reference) --------------------------
linux_pair() {
    local k=$1 d="$OUT/$1/linux-pair"
    mkdir -p "$d"
    local b_uname
    b_uname=$(TIMEOUT=30 bash "$LAB_DIR/peer.sh" exec "$PEER_B" 'uname -r' 2>/dev/null)
    if [ "$b_uname" != "$k" ]; then
        bash "$LAB_DIR/peer.sh" stop "$PEER_B" >/dev/null 2>&1
        STARTED_PEER_B=1
        KERNEL=$kv SMP=${SMP_B:-1} bash "$LAB_DIR/peer.sh" start "$PEER_B" >"$d/peer-b-start.log" 2>&1 \
            || { result "$k" linux-pair boot 1 "see $d/peer-b-start.log"; return; }
    fi
    cp "$LAB_DIR/guest/nvmet.sh" "${LAB:-/var/tmp/roce-lab}/run/$PEER_B/nvmet.sh"
    TIMEOUT=$STEP_TIMEOUT bash "$LAB_DIR/peer.sh" exec "$PEER_B" "bash /lab/nvmet.sh up $THEIR_NQN $NS_MB" \
        >"$d/nvmet.log" 2>&1 || { result "$k" linux-pair nvmet 1 "nvmet.sh up on $PEER_B failed"; return; }
    peer_run "$GUEST_MODPROBE" 60 >/dev/null 2>&1
    loss_case "$k" linux-pair "$d" "nvme connect -t rdma -n $THEIR_NQN -a $PEER_B_IP -s 4420" "$THEIR_NQN"
    TIMEOUT=60 bash "$LAB_DIR/peer.sh" exec "$PEER_B" 'dmesg -c' >"$d/dmesg-target.log" 2>&1
    TIMEOUT=60 bash "$LAB_DIR/peer.sh" exec "$PEER_B" "bash /lab/nvmet.sh down $THEIR_NQN" >>"$d/nvmet.log" 2>&1
}

# --- our host against Linux's target ----------------------------------------------------------
linux_target() {
    local k=$1 d="$OUT/$1/linux-target" rc
    mkdir -p "$d"
    local ours=(--bind "$HOST_IP")
    # The repository's nvmet.sh, through the share: the image's copy may be older.
    cp "$LAB_DIR/guest/nvmet.sh" "${LAB:-/var/tmp/roce-lab}/run/$PEER/nvmet.sh"
    peer_run "bash /lab/nvmet.sh up $THEIR_NQN $THEIR_MB" >"$d/nvmet.log" 2>&1 \
        || { result "$k" linux-target nvmet 1 "nvmet.sh up failed"; return; }
    capture_start "$d"

    nsx timeout "$STEP_TIMEOUT" "$ROCE" nvmf discover "$PEER_IP" "${ours[@]}" >"$d/discover.log" 2>&1; rc=$?
    grep -q "$THEIR_NQN" "$d/discover.log" || rc=1
    result "$k" linux-target discover "$rc" "$(head -n 1 "$d/discover.log")"

    nsx timeout "$STEP_TIMEOUT" "$ROCE" nvmf check "$PEER_IP" "${ours[@]}" --nqn "$THEIR_NQN" \
        --blocks "$CHECK_BLOCKS" --pcap "$d/check.pcap" >"$d/check.log" 2>&1; rc=$?
    result "$k" linux-target check "$rc" "$(tail -n 1 "$d/check.log")"

    for rw in randread randwrite; do
        nsx timeout $((STEP_TIMEOUT)) "$ROCE" nvmf perf "$PEER_IP" "${ours[@]}" --nqn "$THEIR_NQN" \
            --rw "$rw" --bs 4096 --qd 16 --time "$PERF_TIME" >"$d/perf-$rw.log" 2>&1; rc=$?
        result "$k" linux-target "perf $rw" "$rc" "$(grep -m1 -oE '[0-9]+ I/Os in .*' "$d/perf-$rw.log")"
    done

    peer_run 'dmesg -c' 60 >"$d/dmesg.log" 2>&1
    capture_check "$d" 'CM request qid=0' 'Connect cid=[0-9]+ qid=0' 'Identify' 'Read cid' 'Write cid'
    result "$k" linux-target capture "$cap_rc" "$cap_note"
    peer_run "bash /lab/nvmet.sh down $THEIR_NQN" 60 >>"$d/nvmet.log" 2>&1
}

: >"$OUT/results.txt"
{
    echo "commit: $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null)$(git -C "$HERE" diff --quiet HEAD 2>/dev/null || echo ' (modified)')"
    echo "host: $(uname -r), $(nproc) CPUs; roce: $("$ROCE" --version 2>/dev/null)"
} | tee "$OUT/setup.txt"
row kernel direction case result "notes"
bash "$LAB_DIR/net.sh" up >/dev/null 2>&1
for k in $KERNELS; do
    # The kernel wanted (the image's default, or the newest whose version starts with $k); a VM
    # already running it is used as it is, else it is booted.
    if [ "$k" = default ]; then want=$(cat "${LAB:-/var/tmp/roce-lab}/images/kernel-version" 2>/dev/null); kv=
    else want=$k; kv=$k; fi
    running=$(TIMEOUT=30 bash "$LAB_DIR/peer.sh" exec "$PEER" 'uname -r' 2>/dev/null)
    if [ -z "$running" ] || [ "${running#"$want"}" = "$running" ]; then
        bash "$LAB_DIR/peer.sh" stop "$PEER" >/dev/null 2>&1
        echo "starting $PEER (kernel $k)..." >&2
        STARTED_PEER=1
        KERNEL=$kv bash "$LAB_DIR/peer.sh" start "$PEER" >"$OUT/peer-start-$k.log" 2>&1 \
            || { result "$k" - boot 1 "see $OUT/peer-start-$k.log"; continue; }
    fi
    uname_r=$(peer_run 'uname -r' 30 2>/dev/null)
    echo "peer ($k): $uname_r${NVME_RDMA_OPTS:+, nvme-rdma $NVME_RDMA_OPTS}" | tee -a "$OUT/setup.txt"
    for dir in $DIRECTIONS; do
        case $dir in
        linux-host) linux_host "$uname_r" ;;
        linux-target) linux_target "$uname_r" ;;
        linux-pair) linux_pair "$uname_r" ;;
        esac
    done
done

echo "$((N - FAILS))/$N cases passed; logs and captures in $OUT" | tee -a "$OUT/results.txt"
[ "$FAILS" -eq 0 ]
