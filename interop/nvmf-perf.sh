#!/bin/bash
# shellcheck disable=SC2016 # guest commands: their $variables expand in the guest
# 4 KiB random read and random write at queue depth 1 and 32 (docs/performance.md, "NVMe-oF"):
#
#  (i)  Linux's initiator (fio in vmA, libaio, direct=1) against `roce nvmf target` (netns
#       rxelab, 10.77.0.1) and against the kernel's nvmet-rdma in vmB (10.77.0.12, a RAM-backed
#       loop device), both connected at once, the runs alternating target by target, ROUNDS
#       rounds; IOPS and completion latency p50/p99 from fio's JSON;
#  (ii) this stack's initiator (`roce nvmf perf`) against this stack's target on the host's
#       loopback (127.0.0.1 / 127.0.0.2), outside the VMs.
#
#   bash interop/nvmf-perf.sh       # about 10 minutes under TCG
#
# Under TCG (emulated CPUs) the VM figures are slow in absolute terms; the ratio between the
# two targets, measured by the same initiator in the same boot, is what counts.
#
# Variables (defaults in brackets): LAB_DIR [interop/lab]  NS [rxelab]  ROCE
#   [target/release/roce]  OUT [/tmp/nvmf-perf-DATE]  ROUNDS [2]  RUNTIME [10] s per fio run
#   (after a 2 s ramp)  NS_MB [128]  SMP [1] CPUs per VM  LOOP_TIME [5] s per loopback run
#   QDS [1 32]  RWS [randread randwrite]
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$HERE/lab}
NS=${NS:-rxelab}
ROCE=${ROCE:-$HERE/../target/release/roce}
OUT=${OUT:-/tmp/nvmf-perf-$(date +%Y%m%d-%H%M%S)}
ROUNDS=${ROUNDS:-2}
RUNTIME=${RUNTIME:-10}
NS_MB=${NS_MB:-128}
LOOP_TIME=${LOOP_TIME:-5}
QDS=${QDS:-1 32}
RWS=${RWS:-randread randwrite}
export SMP=${SMP:-1}
OURS_NQN=nqn.2026-12.org.example:roce-target
KERNEL_NQN=nqn.2026-12.org.example.roce-lab:ram0
HOST_IP=10.77.0.1
VMB_IP=10.77.0.12

mkdir -p "$OUT"
ROCE=$(readlink -f "$ROCE")
[ -x "$ROCE" ] || { echo "no roce binary at $ROCE (cargo build --release -p roce-cli)" >&2; exit 2; }

BG_PIDS=()
cleanup() {
    for p in "${BG_PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
    sleep 0.5
    for p in "${BG_PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
    bash "$LAB_DIR/peer.sh" stop vmA >/dev/null 2>&1
    bash "$LAB_DIR/peer.sh" stop vmB >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM
peer() { TIMEOUT=${3:-300} bash "$LAB_DIR/peer.sh" exec "$1" "$2"; }
# bg_start LOG CMD...: CMD (in the netns when NETNS=1) in a process group of its own; sets bg.
bg_start() {
    local log=$1; shift
    if [ "${NETNS:-1}" = 1 ]; then setsid ip netns exec "$NS" "$@" >"$log" 2>&1 &
    else setsid "$@" >"$log" 2>&1 & fi
    bg=$!; BG_PIDS+=("$bg")
}
bg_stop() {
    kill -TERM -- "-$1" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

{
    echo "commit: $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null)$(git -C "$HERE" diff --quiet HEAD 2>/dev/null || echo ' (modified)')"
    echo "host: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); VMs: SMP=$SMP, ${ACCEL:-tcg}"
} | tee "$OUT/setup.txt"

# --- (i) in the VMs --------------------------------------------------------------------------
bash "$LAB_DIR/net.sh" up >/dev/null 2>&1
bash "$LAB_DIR/peer.sh" start vmA >"$OUT/vmA-start.log" 2>&1 || { echo "vmA did not start" >&2; exit 2; }
bash "$LAB_DIR/peer.sh" start vmB >"$OUT/vmB-start.log" 2>&1 || { echo "vmB did not start" >&2; exit 2; }
cp "$LAB_DIR/guest/nvmet.sh" "${LAB:-/var/tmp/roce-lab}/run/vmB/nvmet.sh"   # the repository's copy
peer vmB "bash /lab/nvmet.sh up $KERNEL_NQN $NS_MB" >"$OUT/nvmet.log" 2>&1 || { echo "nvmet.sh up failed" >&2; exit 2; }
bg_start "$OUT/target.log" timeout 3600 "$ROCE" nvmf target --bind "$HOST_IP" --nqn "$OURS_NQN" \
    --mem $((NS_MB * 256)) --block-size 4096
sleep 2
# (nvmeXcYnZ: a path of a multipath namespace, hidden, no block device of its own)
NSDEV='nsdev() { for b in /sys/block/nvme*n*; do
    case ${b##*/} in nvme*c*n*) continue ;; esac
    if [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$1" ] || [ "$(cat "$b/device/device/subsysnqn" 2>/dev/null)" = "$1" ]; then
        echo "/dev/${b##*/}"; return 0; fi; done; return 1; }'
peer vmA "$NSDEV; set -e; modprobe nvme-rdma; nvme connect -t rdma -n $OURS_NQN -a $HOST_IP -s 4420
    nvme connect -t rdma -n $KERNEL_NQN -a $VMB_IP -s 4420; sleep 2; nsdev $OURS_NQN; nsdev $KERNEL_NQN; nvme list" \
    >"$OUT/connect.log" 2>&1 || { echo "connect failed; see $OUT/connect.log" >&2; exit 1; }
echo "vmA: $(peer vmA 'uname -r'), fio $(peer vmA 'fio --version')" | tee -a "$OUT/setup.txt"

: >"$OUT/fio.tsv"
for round in $(seq "$ROUNDS"); do
    for rw in $RWS; do
        for qd in $QDS; do
            for t in ours kernel; do
                nqn=$OURS_NQN; [ "$t" = kernel ] && nqn=$KERNEL_NQN
                j=fio-$t-$rw-qd$qd-r$round.json
                cmd="fio --name=p --filename=\$(nsdev $nqn) --rw=$rw --bs=4k --iodepth=$qd --ioengine=libaio \
--direct=1 --time_based --runtime=$RUNTIME --ramp_time=2 --norandommap --randrepeat=0 --output-format=json"
                echo "[$(date +%T)] $t $rw qd=$qd round $round: $cmd" >>"$OUT/commands.txt"
                peer vmA "$NSDEV; $cmd > /lab/$j" $((RUNTIME + 120)) >/dev/null 2>&1
                cp "${LAB:-/var/tmp/roce-lab}/run/vmA/$j" "$OUT/" 2>/dev/null
                python3 - "$OUT/$j" "$t" "$rw" "$qd" "$round" >>"$OUT/fio.tsv" <<'EOF'
import json, sys
path, t, rw, qd, rnd = sys.argv[1:]
try:
    j = json.load(open(path))["jobs"][0]
    side = j["read" if rw == "randread" else "write"]
    p = side["clat_ns"]["percentile"]
    print(f"{t}\t{rw}\t{qd}\t{rnd}\t{side['iops']:.0f}\t{p['50.000000']/1000:.0f}\t{p['99.000000']/1000:.0f}\t{j['error']}")
except Exception as e:
    print(f"{t}\t{rw}\t{qd}\t{rnd}\tERR\t-\t-\t{e}")
EOF
                tail -n 1 "$OUT/fio.tsv"
            done
        done
    done
done
peer vmA "nvme disconnect -n $OURS_NQN; nvme disconnect -n $KERNEL_NQN" 60 >/dev/null 2>&1
bg_stop "$bg"

# --- (ii) on the host's loopback --------------------------------------------------------------
: >"$OUT/loopback.jsonl"
NETNS=0 bg_start "$OUT/loop-target.log" timeout 600 "$ROCE" nvmf target --bind 127.0.0.1 \
    --mem $((NS_MB * 256)) --block-size 4096
sleep 1
for rw in $RWS; do
    for qd in $QDS; do
        echo "roce nvmf perf 127.0.0.1 --bind 127.0.0.2 --rw $rw --bs 4096 --qd $qd --time $LOOP_TIME --json" >>"$OUT/commands.txt"
        timeout $((LOOP_TIME + 60)) "$ROCE" nvmf perf 127.0.0.1 --bind 127.0.0.2 --rw "$rw" --bs 4096 --qd "$qd" \
            --time "$LOOP_TIME" --json 2>>"$OUT/loop-perf.log" | tee -a "$OUT/loopback.jsonl"
    done
done
bg_stop "$bg"

# --- the table: medians over the rounds --------------------------------------------------------
python3 - "$OUT/fio.tsv" "$OUT/loopback.jsonl" <<'EOF' | tee "$OUT/table.md"
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print("| initiator | target | pattern | QD | IOPS | p50 µs | p99 µs |")
print("|---|---|---|---|---|---|---|")
keys = []
for r in rows:
    k = (r[1], r[2], r[0])
    if k not in keys:
        keys.append(k)
for rw, qd, t in keys:
    v = [r for r in rows if (r[1], r[2], r[0]) == (rw, qd, t) and r[4] != "ERR"]
    if not v:
        print(f"| fio (vmA) | {t} | {rw} | {qd} | failed | | |"); continue
    med = lambda i: statistics.median(float(x[i]) for x in v)
    name = "roce nvmf target (host)" if t == "ours" else "nvmet-rdma (vmB)"
    print(f"| fio (vmA) | {name} | {rw} | {qd} | {med(4):.0f} | {med(5):.0f} | {med(6):.0f} |")
for l in open(sys.argv[2]):
    try:
        j = json.loads(l)
    except ValueError:
        continue
    print(f"| roce nvmf perf (loopback) | roce nvmf target (loopback) | {j['rw']} | {j['qd']} | {j['iops']:.0f} | {j['lat_us']['p50']} | {j['lat_us']['p99']} |")
EOF
echo "logs in $OUT"
