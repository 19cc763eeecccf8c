#!/bin/bash
# shellcheck disable=SC2206,SC2086 # flag strings ($QPERF_OPTS, $args ...) become words of a command on purpose
# RDMA middleware against the kernel's rxe: Debian's qperf and ucx_perftest, unmodified, one
# end over rxe in the lab VM and the other on this stack on the host (the same Debian binaries
# under `roce exec`: the drop-in libibverbs.so.1 and librdmacm.so.1), both roles. One row per
# case; exit 0 only when every case passed.
#
#   bash interop/middleware.sh                                  # every case (about 10 min with KVM)
#   QPERF_TESTS="rc_lat rc_bw" UCX_TESTS= bash interop/middleware.sh   # a subset ('' skips a program)
#
# qperf (0.4.11): `-cm1` (connections through the RDMA CM: qperf's own address exchange carries
# no GRH, which every RoCE device needs). A qperf server runs for the whole role; the client
# runs each test of QPERF_TESTS alone, QPERF_RUNS times, `-t QPERF_TIME`. A run passes when
# the client exits 0, prints the test's quantity (latency, bw or msg_rate) and neither side
# says "failed", "rejected", "timed out" or "error".
#
# ucx_perftest (UCX 1.13): a server and a client for each test of UCX_TESTS and each transport
# set of UCX_TLS_SETS (UCX_TLS), UCX_NET_DEVICES naming the one RoCE device of each side
# (rxe0:1 in the guest, roce_<if>:1 here), UCX_ITERS iterations, over ucx_perftest's TCP side
# channel (-p PORT). A run passes when both exit 0, the client prints its `Final:` line with
# every iteration, and neither says "unhandled timeout" or "error".
#
# Every run is captured on the VM's tap (at most CAPTURE_PACKETS packets) and decoded with
# `roce inspect`: a run passes only when the capture holds RoCE packets and every ICRC in it
# is valid. Logs, captures and decodes go to $OUT/CASE/.
#
# Variables (defaults in brackets):
#   LAB_DIR [interop/lab]  PEER [vmA]  NS [rxelab]  HOST_IP [10.77.0.1]  PEER_IP [10.77.0.11]
#   CAP_IF [tap0]  ROCE [target/release/roce]  OUT [/tmp/middleware-DATE]
#   ROLES [our-client our-server]  CASE_TIMEOUT [120] s per tool run
#   QPERF_TESTS [every RC test of Debian's qperf]  QPERF_OPTS [-cm1]  QPERF_TIME [2]
#   QPERF_RUNS [3]  QPERF_PORT [19765]
#   UCX_TESTS [tag_lat tag_bw ucp_put_bw ucp_get]  UCX_TLS_SETS [rc_verbs,ud_verbs ud_verbs]
#   UCX_ITERS [1000]  UCX_PORT [13337]  UCX_EXTRA ['': more VAR=value for both sides]
#   THEIR_UCX_EXTRA [UCX_UD_ETH_DGID_CHECK=n]: for the guest's side only. rxe leaves a UD
#               receive's wc.sl 0, and UCX 1.13's UD transport then reads the IPv4 header
#               rxe writes in the GRH area as an IPv6 one and drops every packet (rxe against
#               rxe inside the VM too: docs/interop.md "Middleware: qperf and UCX");
#               THEIR_UCX_EXTRA= runs UCX's default on rxe, to see that.
#   CAPTURE_PACKETS [100000]
#   TXCSUM_OFF [1]: tx checksum offload off on br0, so captures hold real UDP checksums
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$HERE/lab}
PEER=${PEER:-vmA}
NS=${NS-rxelab}
HOST_IP=${HOST_IP:-10.77.0.1}
PEER_IP=${PEER_IP:-10.77.0.11}
CAP_IF=${CAP_IF:-tap0}
ROCE=${ROCE:-$HERE/../target/release/roce}
OUT=${OUT:-/tmp/middleware-$(date +%Y%m%d-%H%M%S)}
ROLES=${ROLES:-our-client our-server}
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
QPERF_TESTS=${QPERF_TESTS-rc_bi_bw rc_bw rc_compare_swap_mr rc_fetch_add_mr rc_lat rc_rdma_read_bw rc_rdma_read_lat rc_rdma_write_bw rc_rdma_write_lat rc_rdma_write_poll_lat ver_rc_compare_swap ver_rc_fetch_add}
QPERF_OPTS=${QPERF_OPTS--cm1}
QPERF_TIME=${QPERF_TIME:-2}
QPERF_RUNS=${QPERF_RUNS:-3}
QPERF_PORT=${QPERF_PORT:-19765}
UCX_TESTS=${UCX_TESTS-tag_lat tag_bw ucp_put_bw ucp_get}
UCX_TLS_SETS=${UCX_TLS_SETS-rc_verbs,ud_verbs ud_verbs}
UCX_ITERS=${UCX_ITERS:-1000}
UCX_PORT=${UCX_PORT:-13337}
UCX_EXTRA=${UCX_EXTRA:-}
THEIR_UCX_EXTRA=${THEIR_UCX_EXTRA-UCX_UD_ETH_DGID_CHECK=n}
CAPTURE_PACKETS=${CAPTURE_PACKETS:-100000}
TXCSUM_OFF=${TXCSUM_OFF:-1}

mkdir -p "$OUT"
ROCE=$(readlink -f "$ROCE")
[ -x "$ROCE" ] || { echo "no roce binary at $ROCE (cargo build --release -p roce-cli -p roce-ibverbs)" >&2; exit 2; }

nsx() { if [ -n "$NS" ]; then ip netns exec "$NS" "$@"; else "$@"; fi; }
# In a background subshell: exec, so that $! is the program itself.
nsx_exec() { if [ -n "$NS" ]; then exec ip netns exec "$NS" "$@"; else exec "$@"; fi; }

STARTED_PEER=0
BG_PIDS=()   # process groups (setsid) of ours, and tcpdumps
cleanup() {
    for p in "${BG_PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
    if [ "$STARTED_PEER" = 1 ]; then
        bash "$LAB_DIR/peer.sh" stop "$PEER" >/dev/null 2>&1
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the peer (the lab VM, through peer.sh) ---------------------------------------------
peer_run() { TIMEOUT=${2:-60} bash "$LAB_DIR/peer.sh" exec "$PEER" "$1"; }
peer_bg() { bash "$LAB_DIR/peer.sh" bg "$PEER" "$1"; }
peer_wait() { TIMEOUT=$((CASE_TIMEOUT + 30)) bash "$LAB_DIR/peer.sh" wait "$PEER" "$1"; }
# peer_listening PORT: waits (20 s at most) until a TCP socket listens on PORT in the guest.
peer_listening() {
    peer_run "for _ in \$(seq 100); do ss -ltn | grep -q ':$1 ' && exit 0; sleep 0.2; done; exit 1" 40 >/dev/null 2>&1
}
# our_listening PORT: the same on our side.
our_listening() {
    local _i
    for _i in $(seq 100); do
        nsx ss -ltn 2>/dev/null | grep -q ":$1 " && return 0
        sleep 0.2
    done
    return 1
}

bash "$LAB_DIR/net.sh" up >/dev/null 2>&1
if ! TIMEOUT=60 bash "$LAB_DIR/peer.sh" exec "$PEER" true >/dev/null 2>&1; then
    echo "starting $PEER..." >&2
    bash "$LAB_DIR/peer.sh" start "$PEER" >"$OUT/peer-start.log" 2>&1 \
        || { echo "the peer did not start; see $OUT/peer-start.log" >&2; exit 2; }
    STARTED_PEER=1
fi
if [ "$TXCSUM_OFF" = 1 ]; then
    nsx python3 - br0 <<'EOF' >/dev/null 2>&1 || echo "warning: could not turn tx checksum offload off on br0" >&2
import ctypes, fcntl, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
b = ctypes.create_string_buffer(struct.pack("II", 0x17, 0))   # ETHTOOL_STXCSUM off
fcntl.ioctl(s.fileno(), 0x8946, struct.pack("16sQ", sys.argv[1].encode(), ctypes.addressof(b)))
EOF
fi

# Our device: roce_<the interface holding HOST_IP> (roce_br0 in the lab).
OUR_IF=$(nsx ip -o -4 addr show | awk -v ip="$HOST_IP" '{split($4, a, "/")} a[1] == ip {print $2; exit}')
OUR_DEV=roce_${OUR_IF:-?}
ours_exec=("$ROCE" exec --devices "$OUR_DEV" --addr "$HOST_IP" --)
{
    echo "commit: $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null)$(git -C "$HERE" diff --quiet HEAD 2>/dev/null || echo ' (modified)')"
    echo "host: $(uname -r), $(nproc) CPUs; roce: $("$ROCE" --version 2>/dev/null)"
    # shellcheck disable=SC2016 # expands in the guest
    echo "peer: $(peer_run 'echo "$(uname -r), $(nproc) CPU(s)"; dpkg-query -W -f "\${Package} \${Version}; " qperf ucx-utils libucx0 rdma-core')"
    echo "qemu: $(ps -o args= -p "$(cat "${LAB:-/var/tmp/roce-lab}/run/$PEER/qemu.pid" 2>/dev/null)" 2>/dev/null | grep -oE -- '-accel [^ ]+')"
} | tee "$OUT/setup.txt"

# --- one run ----------------------------------------------------------------------------
# capture_start DIR / capture_stop: tcpdump on $CAP_IF for one run; capture_stop decodes it
# into DIR/inspect.txt and sets rc_insp (roce inspect's status; 3 when no RoCE packet).
capture_start() {
    ( nsx_exec tcpdump -i "$CAP_IF" -s 0 -U -c "$CAPTURE_PACKETS" -w "$1/capture.pcap" udp port 4791 \
        >"$1/tcpdump.log" 2>&1 ) &
    cap=$!; BG_PIDS+=("$cap"); cap_dir=$1
    sleep 1
}
capture_stop() {
    sleep 0.5; kill -TERM "$cap" 2>/dev/null; wait "$cap" 2>/dev/null
    "$ROCE" inspect --summary "$cap_dir/capture.pcap" >"$cap_dir/inspect.txt" 2>&1; rc_insp=$?
    pkts=$(grep -oE '[0-9]+ packets? captured' "$cap_dir/tcpdump.log" | grep -oE '^[0-9]+' || echo 0)
    [ "$rc_insp" -eq 0 ] && [ "${pkts:-0}" -eq 0 ] && rc_insp=3
}
# our_bg SECONDS LOG CMD...: starts CMD on our side in a session of its own, bounded by
# SECONDS, output to LOG; sets bg.
our_bg() {
    local limit=$1 log=$2; shift 2
    ( nsx_exec setsid timeout "$limit" "$@" >"$log" 2>&1 ) &
    bg=$!; BG_PIDS+=("$bg")
}
# our_stop: ends $bg's process group (a server that serves until stopped); its status in rc_bg.
our_stop() {
    kill -TERM -- "-$bg" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$bg" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$bg" 2>/dev/null
    wait "$bg" 2>/dev/null; rc_bg=$?
}

FAILS=0
N=0
row() { printf '%-24s %-20s %-18s %-5s %s\n' "$@" | tee -a "$OUT/results.txt"; }
: >"$OUT/results.txt"
row case tls/opts direction result "figures; roce inspect"

# --- qperf ------------------------------------------------------------------------------
# qperf_fig LOG TEST: the test's figures ("12.3 us", "1.1 GB/sec", "45 K/sec").
qperf_fig() {
    awk -v t="$2:" '$0 == t {f = 1; next} f && /^[^ ]/ {f = 0} f && /=/ {print $1 "=" $3 " " $4}' "$1" | tr '\n' ' ' | sed 's/ $//'
}
qperf_qty() { case $1 in *_lat) echo latency ;; *_bw) echo bw ;; *) echo msg_rate ;; esac; }
bad_words="failed|rejected|timed out|[Ee]rror|unexpected"
for role in $ROLES; do
    [ -n "$QPERF_TESTS" ] || break
    srv_dir="$OUT/qperf-server-$role"; mkdir -p "$srv_dir"
    if [ "$role" = our-client ]; then
        dir="their-srv<-our-cli"
        # The guest's server, stopped through its pid file when the role is done.
        h=$(peer_bg "timeout $((CASE_TIMEOUT * 40)) qperf -lp $QPERF_PORT & echo \$! > /tmp/qperf.pid; wait \$!")
        peer_listening "$QPERF_PORT" || echo "warning: the guest's qperf does not listen on $QPERF_PORT" >&2
    else
        dir="our-srv<-their-cli"
        # It serves every run of the role: bounded as the guest's server is.
        our_bg $((CASE_TIMEOUT * 40)) "$srv_dir/server.log" "${ours_exec[@]}" qperf -lp "$QPERF_PORT"
        qbg=$bg
        our_listening "$QPERF_PORT" || echo "warning: our qperf does not listen on $QPERF_PORT" >&2
    fi
    for t in $QPERF_TESTS; do
        for run in $(seq "$QPERF_RUNS"); do
            N=$((N + 1))
            case_dir="$OUT/qperf-$t-$role-$run"; mkdir -p "$case_dir"
            capture_start "$case_dir"
            if [ "$role" = our-client ]; then
                nsx timeout "$CASE_TIMEOUT" "${ours_exec[@]}" qperf "$PEER_IP" -lp "$QPERF_PORT" $QPERF_OPTS \
                    -t "$QPERF_TIME" "$t" >"$case_dir/client.log" 2>&1; rc_cli=$?
            else
                peer_run "timeout $CASE_TIMEOUT qperf $HOST_IP -lp $QPERF_PORT $QPERF_OPTS -t $QPERF_TIME $t" \
                    $((CASE_TIMEOUT + 30)) >"$case_dir/client.log" 2>&1; rc_cli=$?
            fi
            capture_stop
            q=$(qperf_qty "$t")
            val=$(awk -v q="$q" '$1 == q && $2 == "=" {print $3; exit}' "$case_dir/client.log")
            res=PASS
            if [ "$rc_cli" -ne 0 ] || [ -z "$val" ] || ! awk -v v="$val" 'BEGIN {exit !(v > 0)}' \
                || grep -qE "$bad_words" "$case_dir/client.log" || [ "$rc_insp" -ne 0 ]; then
                res=FAIL; FAILS=$((FAILS + 1))
            fi
            row "qperf $t #$run" "$QPERF_OPTS -t $QPERF_TIME" "$dir" "$res" \
                "$(qperf_fig "$case_dir/client.log" "$t") [rc=$rc_cli]; $(tail -n 1 "$case_dir/inspect.txt") [rc=$rc_insp]"
        done
    done
    if [ "$role" = our-client ]; then
        # shellcheck disable=SC2016 # expands in the guest
        peer_run 'kill $(cat /tmp/qperf.pid) 2>/dev/null; true' >/dev/null 2>&1
        peer_wait "$h" >"$srv_dir/server.log" 2>&1
    else
        bg=$qbg; our_stop
    fi
    if grep -qE "$bad_words" "$srv_dir/server.log"; then
        echo "note: qperf's server ($role) said:" >&2; grep -E "$bad_words" "$srv_dir/server.log" | head -n 5 >&2
    fi
done

# --- ucx_perftest -----------------------------------------------------------------------
# ucx_fig LOG: the client's Final: line as "lat X us, bw Y MB/s, Z msg/s" (overall values).
ucx_fig() {
    awk '$1 == "Final:" {printf "lat %s us, bw %s MB/s, %s msg/s", $5, $7, $9; exit}' "$1"
}
ucx_lanes() { # the transports UCX used (UCX_LOG_LEVEL=info: ep_cfg lines), once each
    grep -oE 'ep_cfg\[[0-9]+\]: .*' "$1" | grep -oE '(rc|ud)_verbs/[a-z_0-9]+:[0-9]' | sort -u | tr '\n' ' '
}
for tls in $UCX_TLS_SETS; do
    [ -n "$UCX_TESTS" ] || break
    for t in $UCX_TESTS; do
        for role in $ROLES; do
            N=$((N + 1)); port=$((UCX_PORT + N % 50))
            case_dir="$OUT/ucx-$tls-$t-$role"; mkdir -p "$case_dir"
            their_env="UCX_TLS=$tls UCX_NET_DEVICES=\$DEV:1 UCX_LOG_LEVEL=info $UCX_EXTRA $THEIR_UCX_EXTRA"
            our_env=(env "UCX_TLS=$tls" "UCX_NET_DEVICES=$OUR_DEV:1" UCX_LOG_LEVEL=info $UCX_EXTRA)
            args="-p $port -t $t -n $UCX_ITERS"
            capture_start "$case_dir"
            if [ "$role" = our-client ]; then
                dir="their-srv<-our-cli"
                h=$(peer_bg "env $their_env timeout $CASE_TIMEOUT ucx_perftest $args")
                peer_listening "$port" || echo "warning: the guest's ucx_perftest does not listen on $port" >&2
                nsx timeout "$CASE_TIMEOUT" "${ours_exec[@]}" "${our_env[@]}" ucx_perftest "$PEER_IP" $args \
                    >"$case_dir/client.log" 2>&1; rc_cli=$?
                peer_wait "$h" >"$case_dir/server.log" 2>&1; rc_srv=$?
            else
                dir="our-srv<-their-cli"
                our_bg "$CASE_TIMEOUT" "$case_dir/server.log" "${ours_exec[@]}" "${our_env[@]}" ucx_perftest $args
                our_listening "$port" || echo "warning: our ucx_perftest does not listen on $port" >&2
                peer_run "env $their_env timeout $CASE_TIMEOUT ucx_perftest $HOST_IP $args" \
                    $((CASE_TIMEOUT + 30)) >"$case_dir/client.log" 2>&1; rc_cli=$?
                # The server ends by itself after the test: 10 s, then it is stopped.
                for _ in $(seq 100); do kill -0 "$bg" 2>/dev/null || break; sleep 0.1; done
                our_stop; rc_srv=$rc_bg
            fi
            capture_stop
            iters=$(awk '$1 == "Final:" {print $2; exit}' "$case_dir/client.log")
            res=PASS
            if [ "$rc_cli" -ne 0 ] || [ "$rc_srv" -ne 0 ] || [ "${iters:-0}" != "$UCX_ITERS" ] \
                || grep -qiE "unhandled timeout|error" "$case_dir/client.log" "$case_dir/server.log" \
                || [ "$rc_insp" -ne 0 ]; then
                res=FAIL; FAILS=$((FAILS + 1))
            fi
            row "ucx_perftest $t" "$tls" "$dir" "$res" \
                "$(ucx_fig "$case_dir/client.log") [rc=$rc_srv/$rc_cli]; lanes: $(ucx_lanes "$case_dir/client.log"); $(tail -n 1 "$case_dir/inspect.txt") [rc=$rc_insp]"
        done
    done
done

echo "$((N - FAILS))/$N runs passed; logs and captures in $OUT" | tee -a "$OUT/results.txt"
[ "$FAILS" -eq 0 ]
