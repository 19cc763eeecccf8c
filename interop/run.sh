#!/bin/bash
# shellcheck disable=SC2206 # flag strings ($pf, $qflag, $CHK ...) become words of a command on purpose
# Interop matrix: `roce pingpong` against rdma-core's ibv_{rc,uc,ud,srq}_pingpong,
# `roce perf --perftest` against perftest's eight tools (also with -R), `roce rping` and
# `roce udaddy` against librdmacm's rping and udaddy, the same unmodified pingpong, perftest and
# librdmacm programs on our side over the drop-in libraries (`roce exec`), rstream and riostream
# (rsockets) on our drop-in libraries against theirs, and loss cases, on a real RoCE peer,
# both roles, each case captured and every ICRC checked with
# `roce inspect`. One row per case; exit 0 only when every case passed.
#
#   bash interop/run.sh                     # the rxe lab (interop/lab), VM vmA
#   PEER_MODE=ssh PEER_SSH=user@host PEER_IP=192.0.2.2 HOST_IP=192.0.2.1 \
#     PEER_DEV=mlx5_0 PEER_GIDX=3 CAP_IF=enp1s0f0 NS= bash interop/run.sh   # a hardware NIC
#
# Variables (defaults in brackets):
#   PEER_MODE   lab | ssh [lab]. lab: drive the VM with $LAB_DIR/peer.sh (started if
#               needed, stopped at the end if this script started it); ssh: run the
#               peer's commands with `ssh $PEER_SSH`.
#   LAB_DIR     the lab scripts [interop/lab: net.sh up, peer.sh start|exec|bg|wait|stop];
#               PEER  the lab VM [vmA]
#   NS          network namespace our side runs in ('' = none) [rxelab]
#   HOST_IP     our address (the RoCE device and the TCP end) [10.77.0.1]
#   PEER_IP     the peer's address [10.77.0.11]
#   PEER_DEV / PEER_GIDX   the peer's device and RoCE v2 GID index (ssh mode; the lab
#               sets $DEV/$GIDX in the guest)
#   CAP_IF      interface to capture on (our side's namespace) [tap0]
#   ROCE        our binary [target/release/roce next to this folder]
#   TRANSPORTS  [rc uc ud srq];  ROLES  [our-client our-server]
#   ITERS [20]  SIZE [4096; ud: 1024]  SRQ_QPS [4]  CHK [-c]  EXTRA_THEIRS / EXTRA_OURS
#   RPING_COUNT [10]  RPING_SIZE [64]  RPING_ROLES [$ROLES; '' skips rping]
#   PERFTEST_TOOLS [the eight ib_*_{bw,lat}; '' skips]  PERFTEST_FLAGS [lines "tool flags": -a, -q 4,
#               -b, -D cases over TCP, -q with -R; '' skips]  PERFTEST_CM_TOOLS [the eight, with -R; '' skips]  UDADDY_ROLES [$ROLES; '' skips]
#   DROPIN_PINGPONG [rc uc ud srq]  DROPIN_PERFTEST [the eight]: the same Debian tools on our side
#               under `roce exec` (the drop-in libibverbs); '' skips.  DROPIN_LOSSES [0 1] (% loss
#               on the peer's egress; 0 = none)  DROPIN_LOSS_PINGPONG [rc srq] (UC, UD: no recovery)
#   DROPIN_CM   [rping udaddy ucmatose rdma_server rdma_xserver cmtime and the eight perftest
#               tools with -R, e.g. write_bw_R]: librdmacm's tools on our side under `roce exec`
#               (the drop-in librdmacm); '' skips.  CMTIME_CONNS [50]  CMTIME_SERVE [60] s (cmtime's
#               server runs until killed: stopped then, which counts as its success)
#   DROPIN_CM_LOSSES [0 1] (% loss on the peer's egress for the DROPIN_CM and rstream cases)
#   RSTREAM_ROLES [$ROLES; '' skips rstream and riostream]
#   LOSSES [1 5] (% loss on both directions; '' skips)  PEER_IF [eth0]  LOSS_OPS [write read send]
#   CASE_TIMEOUT  seconds per tool run [180];  PORT_BASE  first TCP port [18600]
#   OUT         where captures and logs go [/tmp/interop-DATE]
#   TXCSUM_OFF  1: turn off tx checksum offload on $TXCSUM_DEV [br0] first, so the capture
#               holds real UDP checksums (else locally sent packets show partial ones) [1]
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PEER_MODE=${PEER_MODE:-lab}
LAB_DIR=${LAB_DIR:-$HERE/lab}
PEER=${PEER:-vmA}
NS=${NS-rxelab}
HOST_IP=${HOST_IP:-10.77.0.1}
PEER_IP=${PEER_IP:-10.77.0.11}
CAP_IF=${CAP_IF:-tap0}
ROCE=${ROCE:-$HERE/../target/release/roce}
TRANSPORTS=${TRANSPORTS-rc uc ud srq}
ROLES=${ROLES:-our-client our-server}
ITERS=${ITERS:-20}
SRQ_QPS=${SRQ_QPS:-4}
CHK=${CHK--c}
CASE_TIMEOUT=${CASE_TIMEOUT:-180}
PORT_BASE=${PORT_BASE:-18600}
OUT=${OUT:-/tmp/interop-$(date +%Y%m%d-%H%M%S)}
TXCSUM_OFF=${TXCSUM_OFF:-1}
TXCSUM_DEV=${TXCSUM_DEV:-br0}
EXTRA_THEIRS=${EXTRA_THEIRS:-}
EXTRA_OURS=${EXTRA_OURS:-}

mkdir -p "$OUT"
ROCE=$(readlink -f "$ROCE")
[ -x "$ROCE" ] || { echo "no roce binary at $ROCE (cargo build --release -p roce-cli)" >&2; exit 2; }

nsx() { if [ -n "$NS" ]; then ip netns exec "$NS" "$@"; else "$@"; fi; }
# In a background subshell: exec, so that $! is the program itself.
nsx_exec() { if [ -n "$NS" ]; then exec ip netns exec "$NS" "$@"; else exec "$@"; fi; }

STARTED_PEER=0
BG_PIDS=()
cleanup() {
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    if [ "$PEER_MODE" = lab ] && [ "$STARTED_PEER" = 1 ]; then
        bash "$LAB_DIR/peer.sh" stop "$PEER" >/dev/null 2>&1
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the peer -------------------------------------------------------------------------
# In the lab, $DEV and $GIDX expand in the guest (hence single quotes).
# shellcheck disable=SC2016
peer_dev() { if [ "$PEER_MODE" = lab ]; then echo '$DEV'; else echo "${PEER_DEV:?set PEER_DEV}"; fi; }
# shellcheck disable=SC2016
peer_gidx() { if [ "$PEER_MODE" = lab ]; then echo '$GIDX'; else echo "${PEER_GIDX:?set PEER_GIDX}"; fi; }

# peer_bg CMD LOG: starts CMD on the peer, its output to LOG; prints a handle.
peer_bg() {
    if [ "$PEER_MODE" = lab ]; then
        bash "$LAB_DIR/peer.sh" bg "$PEER" "$1"
    else
        ssh -o BatchMode=yes "$PEER_SSH" "$1" > "$2" 2>&1 &
        echo $!
    fi
}
# peer_wait HANDLE LOG: waits, output to LOG, returns the command's status.
peer_wait() {
    if [ "$PEER_MODE" = lab ]; then
        TIMEOUT=$((CASE_TIMEOUT + 30)) bash "$LAB_DIR/peer.sh" wait "$PEER" "$1" > "$2" 2>&1
    else
        wait "$1"
    fi
}

# peer_run CMD: runs CMD on the peer and waits (its output on stdout).
PEER_IF=${PEER_IF:-eth0}
peer_run() {
    if [ "$PEER_MODE" = lab ]; then
        TIMEOUT=120 bash "$LAB_DIR/peer.sh" exec "$PEER" "$1"
    else
        ssh -o BatchMode=yes "$PEER_SSH" "$1"
    fi
}
netem_off() { peer_run "tc qdisc del dev $PEER_IF root 2>/dev/null; true" >/dev/null 2>&1; }

if [ "$PEER_MODE" = lab ]; then
    bash "$LAB_DIR/net.sh" up >/dev/null 2>&1
    if ! TIMEOUT=60 bash "$LAB_DIR/peer.sh" exec "$PEER" true >/dev/null 2>&1; then
        echo "starting $PEER (slow: 30-90 s)..." >&2
        bash "$LAB_DIR/peer.sh" start "$PEER" >"$OUT/peer-start.log" 2>&1 \
            || { echo "the peer did not start; see $OUT/peer-start.log" >&2; exit 2; }
        STARTED_PEER=1
    fi
fi
if [ "$TXCSUM_OFF" = 1 ]; then
    nsx python3 - "$TXCSUM_DEV" <<'EOF' >/dev/null 2>&1 || echo "warning: could not turn tx checksum offload off on $TXCSUM_DEV" >&2
import ctypes, fcntl, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
b = ctypes.create_string_buffer(struct.pack("II", 0x17, 0))   # ETHTOOL_STXCSUM off
fcntl.ioctl(s.fileno(), 0x8946, struct.pack("16sQ", sys.argv[1].encode(), ctypes.addressof(b)))
EOF
fi

# --- one case -------------------------------------------------------------------------
figures() { # the tools' two result lines, joined
    grep -E "bytes in .* Mbit/sec|iters in .* usec/iter" "$1" | sed -E 's/ seconds//g' | tr '\n' ';' | sed 's/;$//'
}

# run_case ROLE CASE_DIR FILTER SRV_WAIT: one case in ROLE (our-client / our-server) with
# the peer's commands in $theirs_srv / $theirs_cli (shell strings) and ours in the arrays
# ours_srv / ours_cli, capturing FILTER on $CAP_IF and waiting SRV_WAIT seconds for the
# peer's server to listen. Leaves ours.log, theirs.log, capture.pcap and inspect.txt in
# CASE_DIR and sets dir, rc_ours, rc_theirs, rc_insp.
# run_case ROLE DIR FILTER SRV_WAIT: one run of a case (see run_case_once), again
# (up to three runs in all) when the peer's perftest refused to report because it could
# not calibrate its cycle counter against the clock (`Correlation coefficient r^2 ...
# Can't produce a report`: an emulated CPU's clock, not the exchange, failed); and
# when, with our server, the peer's client ended well but our server timed out waiting
# for the client's next message while the capture holds no DREQ from the client: the
# DREQ was lost on a lossy link, and Linux's CM does not send it again once the tool
# destroyed its ID (rping does right after rdma_disconnect), so no server can learn of
# the disconnect; and, under loss (LOSSY=1), when with their server the peer's tool ended
# well but ours did not while the capture ends with our retransmissions unanswered: the
# peer's last ACK was lost and its tool, done, had destroyed the QP that would have
# answered them (ibv_rc_pingpong's server exits as soon as it has everything). The retries
# are said on stderr and counted in DIR/clock-retries, DIR/dreq-retries or
# DIR/lastack-retries; the last run's result stands.
last_packet() { # the last packet line of a roce inspect listing
    grep -E "^[0-9]+ [0-9.]+ " "$1" 2>/dev/null | tail -n 1
}
run_case() {
    local try why msg
    rm -f "$2/clock-retries" "$2/dreq-retries" "$2/lastack-retries"
    for try in 1 2 3; do
        run_case_once "$@"
        if grep -q "Can't produce a report" "$2/theirs.log" 2>/dev/null; then
            why=clock msg="the peer's perftest could not calibrate its clock"
        elif [ "$1" = our-server ] && [ "$rc_theirs" -eq 0 ] && [ "$rc_ours" -ne 0 ] \
            && grep -q "timed out waiting for a completion" "$2/ours.log" 2>/dev/null \
            && ! grep -qE " $PEER_IP:[0-9]+ > .* CM DREQ" "$2/inspect.txt" 2>/dev/null; then
            why=dreq msg="the peer's DREQ never reached the link (lost, and not resent)"
        elif [ "${LOSSY:-0}" = 1 ] && [ "$1" = our-client ] && [ "$rc_theirs" -eq 0 ] \
            && [ "$rc_ours" -ne 0 ] && last_packet "$2/inspect.txt" | grep -qE "^[0-9]+ [0-9.]+ $HOST_IP:[0-9]+ > $PEER_IP:4791 .* retx"; then
            why=lastack msg="the peer's last ACK was lost and its tool had ended (our retransmissions unanswered)"
        else
            return 0
        fi
        [ "$try" -lt 3 ] || return 0
        echo "$try" >"$2/$why-retries"
        echo "  $2: $msg; running the case again" >&2
    done
}

run_case_once() {
    local role=$1 case_dir=$2 filter=$3 srv_wait=$4 cap h op try
    mkdir -p "$case_dir"
    ( nsx_exec tcpdump -i "$CAP_IF" -s 0 -U -w "$case_dir/capture.pcap" "$filter" \
        >"$case_dir/tcpdump.log" 2>&1 ) &
    cap=$!; BG_PIDS+=("$cap"); sleep 1
    if [ "$role" = our-client ]; then
        dir="their-srv<-our-cli"
        h=$(peer_bg "$theirs_srv" "$case_dir/theirs.log"); sleep "$srv_wait"
        # The emulated guest can take longer than srv_wait to start its
        # server: a refused connection exchanged nothing, so try again.
        for try in 1 2 3 4 5 6; do
            nsx timeout "$CASE_TIMEOUT" "${ours_cli[@]}" >"$case_dir/ours.log" 2>&1; rc_ours=$?
            if [ "$rc_ours" -eq 0 ] || ! grep -qE "Connection refused|Couldn't connect" "$case_dir/ours.log"; then
                break
            fi
            sleep 5
        done
        peer_wait "$h" "$case_dir/theirs.log"; rc_theirs=$?
    else
        dir="our-srv<-their-cli"
        ( nsx_exec timeout "$CASE_TIMEOUT" "${ours_srv[@]}" >"$case_dir/ours.log" 2>&1 ) &
        op=$!; BG_PIDS+=("$op"); sleep 1
        h=$(peer_bg "$theirs_cli" "$case_dir/theirs.log")
        peer_wait "$h" "$case_dir/theirs.log"; rc_theirs=$?
        if [ "$rc_theirs" -ne 0 ]; then
            # Their client failed (bad flags, a crash): give our server 10 s
            # to notice, then stop it instead of waiting for the case timeout.
            for _ in $(seq 10); do kill -0 "$op" 2>/dev/null || break; sleep 1; done
            kill -TERM "$op" 2>/dev/null
        fi
        wait "$op"; rc_ours=$?
    fi
    sleep 1; kill -TERM "$cap" 2>/dev/null; wait "$cap" 2>/dev/null
    "$ROCE" inspect "$case_dir/capture.pcap" >"$case_dir/inspect.txt" 2>&1; rc_insp=$?
}

FAILS=0
N=0
printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' tool direction tr size result \
    "their figures" "our figures" "roce inspect"
for t in $TRANSPORTS; do
    size=${SIZE:-$([ "$t" = ud ] && echo 1024 || echo 4096)}
    qflag=""; [ "$t" = srq ] && qflag="-q $SRQ_QPS"
    for role in $ROLES; do
        N=$((N + 1))
        port=$((PORT_BASE + N))
        case_dir="$OUT/$t-$role"
        tool="ibv_${t}_pingpong"
        common="-p $port -s $size -n $ITERS $qflag $CHK"
        theirs_srv="timeout $CASE_TIMEOUT $tool -d $(peer_dev) -g $(peer_gidx) $common $EXTRA_THEIRS"
        theirs_cli="$theirs_srv $HOST_IP"
        ours_srv=("$ROCE" pingpong --transport "$t" --bind "$HOST_IP"
                  -p "$port" -s "$size" -n "$ITERS" $qflag $CHK --timeout 60 $EXTRA_OURS)
        ours_cli=("${ours_srv[@]}" "$PEER_IP")
        # Our pingpong client retries its TCP connect: no wait for their server.
        run_case "$role" "$case_dir" "udp port 4791 or tcp port $port" 0
        insp=$(tail -1 "$case_dir/inspect.txt")
        flows=$(awk '/^flow/{f=1;next} f&&NF==0{f=0} f{n++} END{print n+0}' "$case_dir/inspect.txt")
        res=PASS
        if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ "$flows" -lt 2 ]; then
            res=FAIL; FAILS=$((FAILS + 1))
        fi
        printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "$tool" "$dir" "$t" "$size" "$res" \
            "$(figures "$case_dir/theirs.log") [rc=$rc_theirs]" \
            "$(figures "$case_dir/ours.log") [rc=$rc_ours]" \
            "$insp; flows=$flows [rc=$rc_insp]"
    done
done

# --- rping over RDMA CM (IB CM on QP1) -------------------------------------------------
# Per ping: SEND, RDMA READ, SEND, RDMA WRITE, SEND; then DREQ/DREP. Checked: both exit 0,
# both print COUNT ping lines, every ICRC valid. Then a refused connection (no listener:
# REJ reason 8) in each direction.
RPING_COUNT=${RPING_COUNT:-10}
RPING_SIZE=${RPING_SIZE:-64}
RPING_ROLES=${RPING_ROLES-$ROLES}
pings() { grep -c "$2" "$1" 2>/dev/null || true; }
for role in $RPING_ROLES; do
    N=$((N + 1))
    port=$((PORT_BASE + N))
    case_dir="$OUT/rping-$role"
    cflags="-p $port -C $RPING_COUNT -S $RPING_SIZE -v"
    theirs_srv="timeout $CASE_TIMEOUT rping -s -a 0.0.0.0 $cflags"
    theirs_cli="timeout $CASE_TIMEOUT rping -c -a $HOST_IP $cflags -V"
    ours_srv=("$ROCE" rping -s -a "$HOST_IP" -p "$port" -v --timeout 120)
    ours_cli=("$ROCE" rping -c -a "$PEER_IP" --bind "$HOST_IP" $cflags -V --timeout 60)
    run_case "$role" "$case_dir" "udp port 4791" 5
    if [ "$role" = our-client ]; then
        want_ours="^ping data"; want_theirs="server ping data"
    else
        want_ours="server ping data"; want_theirs="^ping data"
    fi
    insp=$(tail -1 "$case_dir/inspect.txt")
    cm=$(grep -c " CM " "$case_dir/inspect.txt" || true)
    po=$(pings "$case_dir/ours.log" "$want_ours"); pt=$(pings "$case_dir/theirs.log" "$want_theirs")
    res=PASS
    if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] \
        || [ "$po" -ne "$RPING_COUNT" ] || [ "$pt" -ne "$RPING_COUNT" ] || [ "$cm" -lt 5 ]; then
        res=FAIL; FAILS=$((FAILS + 1))
    fi
    printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' rping "$dir" rc "$RPING_SIZE" "$res" \
        "$pt pings [rc=$rc_theirs]" "$po pings [rc=$rc_ours]" "$insp; CM MADs=$cm [rc=$rc_insp]"
done
if [ -n "$RPING_ROLES" ]; then
    # Refused: nobody listens on the port.
    N=$((N + 1)); port=$((PORT_BASE + N)); case_dir="$OUT/rping-refused"; mkdir -p "$case_dir"
    nsx timeout 60 "$ROCE" rping -c -a "$PEER_IP" --bind "$HOST_IP" -p "$port" -C 1 \
        --timeout 30 >"$case_dir/ours.log" 2>&1; rc_ours=$?
    # Our stack up (listening on another port) so that it answers with a REJ.
    ( nsx_exec timeout 90 "$ROCE" rping -s -a "$HOST_IP" -p "$((port + 1))" --timeout 60 \
        >"$case_dir/ours-server.log" 2>&1 ) &
    op=$!; BG_PIDS+=("$op"); sleep 1
    h=$(peer_bg "timeout 60 rping -c -a $HOST_IP -p $port -C 1" "$case_dir/theirs.log")
    peer_wait "$h" "$case_dir/theirs.log"; rc_theirs=$?
    kill "$op" 2>/dev/null; wait "$op" 2>/dev/null
    res=PASS
    if [ "$rc_ours" -ne 1 ] || ! grep -q "connection refused" "$case_dir/ours.log" \
        || [ "$rc_theirs" -eq 0 ] || ! grep -q "REJECTED, error 8" "$case_dir/theirs.log"; then
        res=FAIL; FAILS=$((FAILS + 1))
    fi
    printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' rping refused rc - "$res" \
        "$(tr '\n' ' ' <"$case_dir/theirs.log" | cut -c1-40) [rc=$rc_theirs]" \
        "$(cut -c1-40 "$case_dir/ours.log" | head -1) [rc=$rc_ours]" "-"
fi


# --- perftest's eight tools over its TCP exchange -------------------------------------------
PERFTEST_TOOLS=${PERFTEST_TOOLS-write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat}
for tool in $PERFTEST_TOOLS; do
    for role in $ROLES; do
        N=$((N + 1)); port=$((PORT_BASE + N))
        case_dir="$OUT/perftest-$tool-$role"
        pf="-n 200 -p $port"
        case $tool in *_bw) [ "$tool" = atomic_bw ] || pf="$pf -s 4096" ;; esac
        theirs_srv="timeout $CASE_TIMEOUT ib_$tool -d $(peer_dev) -x $(peer_gidx) -F $pf"
        theirs_cli="$theirs_srv $HOST_IP"
        ours_srv=("$ROCE" perf "${tool/_/-}" --perftest --bind "$HOST_IP" $pf)
        ours_cli=("${ours_srv[@]}" "$PEER_IP")
        run_case "$role" "$case_dir" "udp port 4791 or tcp port $port" 5
        rt=$(grep -E "^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+" "$case_dir/theirs.log" | tail -1 | tr -s ' \t' ' ' | cut -c1-42)
        ro=$(grep -E "^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+" "$case_dir/ours.log" | tail -1 | tr -s ' \t' ' ' | cut -c1-42)
        res=PASS
        if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ -z "$rt$ro" ]; then
            res=FAIL; FAILS=$((FAILS + 1))
        fi
        printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "ib_$tool" "$dir" rc - "$res" \
            "$rt [rc=$rc_theirs]" "$ro [rc=$rc_ours]" "$(tail -1 "$case_dir/inspect.txt") [rc=$rc_insp]"
    done
done

row() { grep -E "^ *[0-9]+ +[0-9]+ +([0-9.]+|inf) +([0-9.]+|inf)" "$1" | tail -1 | awk '{print $1, $2, $3, $4}'; }

# --- perftest's flags: all sizes (-a), several QPs (-q), both directions (-b) -----------------
# Checked: both exit 0, every ICRC valid, the last rows agree on size and iterations (-D:
# size) where both sides print one (bidirectional BW: both print the sum of both sides), and with -a the
# client printed all 23 sizes (2 B .. 8 MiB).
PERFTEST_FLAGS=${PERFTEST_FLAGS-"write_bw -a -n 5
write_bw -q 4 -s 4096 -n 100
write_bw -b -s 4096 -n 100
write_bw -a -b -q 2 -n 5
read_bw -a -n 5
read_bw -q 4 -s 4096 -n 100
read_bw -b -s 4096 -n 100
send_bw -a -n 5
send_bw -q 4 -s 4096 -n 100
send_bw -b -s 4096 -n 100
send_bw -a -b -n 5
atomic_bw -q 4 -n 100
atomic_bw -b -n 100
write_lat -a -n 5
read_lat -a -n 5
send_lat -a -n 5
write_bw -D 3 -s 4096
read_bw -D 3 -s 4096
send_bw -D 3 -s 4096
write_bw -D 3 -b -s 4096
send_bw -D 3 -b -s 4096
write_lat -D 3
read_lat -D 3
send_lat -D 3
write_bw -R -q 4 -s 4096 -n 100
read_bw -R -q 4 -s 4096 -n 100
send_bw -R -q 4 -s 4096 -n 100"}
rows() { grep -cE "^ *[0-9]+ +[0-9]+ +([0-9.]+|inf) " "$1" || true; }
while read -r tool flags <&3; do
    [ -n "$tool" ] || continue
    for role in $ROLES; do
        N=$((N + 1)); port=$((PORT_BASE + N))
        case_dir="$OUT/flags-$tool-${flags// /}-$role"
        pf="$flags -p $port"
        # rdma_cm mode (-R) picks its GID itself, as in the -R section.
        xg="-x $(peer_gidx) -F"; case " $flags " in *" -R "*) xg="" ;; esac
        theirs_srv="timeout $CASE_TIMEOUT ib_$tool -d $(peer_dev) $xg $pf"
        theirs_cli="$theirs_srv $HOST_IP"
        ours_srv=("$ROCE" perf "${tool/_/-}" --perftest --bind "$HOST_IP" $pf)
        ours_cli=("${ours_srv[@]}" "$PEER_IP")
        run_case "$role" "$case_dir" "udp port 4791 or tcp port $port" 5
        # Timed runs (-D): each side counts its own iterations; compare sizes.
        f=1-2; case " $flags " in *" -D "*) f=1 ;; esac
        rt=$(row "$case_dir/theirs.log" | cut -d' ' -f$f); ro=$(row "$case_dir/ours.log" | cut -d' ' -f$f)
        ct=${rt:-$ro}; co=${ro:-$rt}
        if [ "$role" = our-client ]; then cl="$case_dir/ours.log"; else cl="$case_dir/theirs.log"; fi
        want=1; case " $flags " in *" -a "*) want=23 ;; esac
        nr=$(rows "$cl")
        res=PASS
        if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ -z "$ct" ] \
            || [ "$ct" != "$co" ] || [ "$nr" -ne "$want" ]; then
            res=FAIL; FAILS=$((FAILS + 1))
        fi
        printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "ib_$tool $flags" "$dir" rc - "$res" \
            "$rt [rc=$rc_theirs]" "$ro [rc=$rc_ours] client rows=$nr" "$(tail -1 "$case_dir/inspect.txt") [rc=$rc_insp]"
    done
done 3<<<"$PERFTEST_FLAGS"

# --- perftest in rdma_cm mode (-R) and udaddy (SIDR) --------------------------------------
PERFTEST_CM_TOOLS=${PERFTEST_CM_TOOLS-write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat}
UDADDY_ROLES=${UDADDY_ROLES-$ROLES}
for tool in $PERFTEST_CM_TOOLS; do
    for role in $ROLES; do
        N=$((N + 1)); port=$((PORT_BASE + N))
        case_dir="$OUT/cm-$tool-$role"
        pf="-n 200 -p $port"
        case $tool in write_bw|read_bw|send_bw) pf="$pf -s 4096" ;; esac
        theirs_srv="timeout $CASE_TIMEOUT ib_$tool -R -d $(peer_dev) $pf"
        theirs_cli="$theirs_srv $HOST_IP"
        ours_srv=("$ROCE" perf "${tool/_/-}" --perftest -R --bind "$HOST_IP" $pf)
        ours_cli=("${ours_srv[@]}" "$PEER_IP")
        run_case "$role" "$case_dir" "udp port 4791" 5
        cm=$(grep -c " CM " "$case_dir/inspect.txt" || true)
        rt=$(row "$case_dir/theirs.log"); ro=$(row "$case_dir/ours.log")
        res=PASS
        # WRITE/READ/atomic BW: both print the client's row. SEND and the
        # latency tests: each side its own figures (READ/atomic latency: only
        # the client), so compare size and iterations where both have a row.
        case $tool in
            write_bw|read_bw|atomic_bw) ct=$rt; co=$ro ;;
            *) rt=$(echo "$rt" | cut -d' ' -f1-2); ro=$(echo "$ro" | cut -d' ' -f1-2)
               ct=${rt:-$ro}; co=${ro:-$rt} ;;
        esac
        if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ -z "$ct" ] \
            || [ "$ct" != "$co" ] || [ "$cm" -lt 6 ]; then
            res=FAIL; FAILS=$((FAILS + 1))
        fi
        printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "ib_$tool -R" "$dir" rc - "$res" \
            "$rt [rc=$rc_theirs]" "$ro [rc=$rc_ours]" "$(tail -1 "$case_dir/inspect.txt"); CM MADs=$cm"
    done
done
for role in $UDADDY_ROLES; do
    N=$((N + 1)); port=$((PORT_BASE + N))
    case_dir="$OUT/udaddy-$role"
    uf="-C 10 -S 100"  # udaddy always uses port 7174
    theirs_srv="timeout $CASE_TIMEOUT udaddy $uf"
    theirs_cli="timeout $CASE_TIMEOUT udaddy -s $HOST_IP $uf"
    ours_srv=("$ROCE" udaddy -b "$HOST_IP" $uf)
    ours_cli=("$ROCE" udaddy -s "$PEER_IP" -b "$HOST_IP" $uf)
    run_case "$role" "$case_dir" "udp port 4791" 5
    ud=$(grep -c "UD SEND_ONLY_WITH_IMMEDIATE" "$case_dir/inspect.txt" || true)
    res=PASS
    if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ "$ud" -ne 20 ] \
        || ! grep -q "data transfers complete" "$case_dir/theirs.log"; then
        res=FAIL; FAILS=$((FAILS + 1))
    fi
    printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' udaddy "$dir" ud 100 "$res" \
        "$(grep -c 'complete' "$case_dir/theirs.log") 'complete' lines [rc=$rc_theirs]" \
        "$(grep -c 'complete' "$case_dir/ours.log") 'complete' lines [rc=$rc_ours]" \
        "$(tail -1 "$case_dir/inspect.txt"); UD datagrams=$ud"
done

# --- Debian's unmodified tools on our side, over the drop-in libibverbs (roce exec) ----------
# The same rdma-core and perftest binaries on both ends: the peer's over its kernel device,
# ours under `roce exec` (crates/roce-ibverbs) on the device that holds HOST_IP. Both
# roles, each case captured and every ICRC checked, then again with the peer's egress under
# `tc netem loss L%` (DROPIN_LOSSES; our side has no loss of its own, its tools being
# unmodified). UC and UD have no recovery, so under loss only DROPIN_LOSS_PINGPONG (rc srq)
# run. A case passes when both tools exit 0, every ICRC is valid and the capture holds RoCE
# traffic both ways (pingpong: both sides validate the data with -c; perftest: a result row).
DROPIN_PINGPONG=${DROPIN_PINGPONG-rc uc ud srq}
DROPIN_PERFTEST=${DROPIN_PERFTEST-write_bw read_bw send_bw atomic_bw write_lat send_lat read_lat atomic_lat}
DROPIN_LOSSES=${DROPIN_LOSSES-0 1}
DROPIN_LOSS_PINGPONG=${DROPIN_LOSS_PINGPONG-rc srq}
# Our device: roce_<the interface holding HOST_IP> (roce_br0 in the lab).
OUR_IF=$(nsx ip -o -4 addr show | awk -v ip="$HOST_IP" '{split($4, a, "/")} a[1] == ip {print $2; exit}')
OUR_DEV=roce_${OUR_IF:-?}
ours_exec=("$ROCE" exec --devices "$OUR_DEV" --addr "$HOST_IP" --)
# peer_loss LOSS LOG WHAT: `tc netem loss LOSS%` on the peer's egress (undone at exit); when
# it cannot be applied, says so (WHAT names the cases skipped) and fails.
peer_loss() {
    if ! peer_run "tc qdisc replace dev $PEER_IF root netem loss ${1}%" >"$2" 2>&1; then
        echo "cannot apply netem on the peer (see $2); $3 loss cases skipped" >&2
        return 1
    fi
    trap 'netem_off; cleanup' EXIT
}
flows_of() { awk '/^flow/{f=1;next} f&&NF==0{f=0} f{n++} END{print n+0}' "$1"; }
for loss in $DROPIN_LOSSES; do
    if [ "$loss" != 0 ]; then
        peer_loss "$loss" "$OUT/dropin-netem-$loss.log" drop-in || break
        pingpongs=$DROPIN_LOSS_PINGPONG; tag="loss=$loss%"; LOSSY=1
    else
        pingpongs=$DROPIN_PINGPONG; tag=""; LOSSY=0
    fi
    for t in $pingpongs; do
        size=${SIZE:-$([ "$t" = ud ] && echo 1024 || echo 4096)}
        qflag=""; [ "$t" = srq ] && qflag="-q $SRQ_QPS"
        tool="ibv_${t}_pingpong"
        for role in $ROLES; do
            N=$((N + 1)); port=$((PORT_BASE + N))
            case_dir="$OUT/dropin-loss$loss-$t-$role"
            common="-p $port -s $size -n $ITERS $qflag $CHK"
            theirs_srv="timeout $CASE_TIMEOUT $tool -d $(peer_dev) -g $(peer_gidx) $common"
            theirs_cli="$theirs_srv $HOST_IP"
            ours_srv=("${ours_exec[@]}" "$tool" -d "$OUR_DEV" -g 0 $common)
            ours_cli=("${ours_srv[@]}" "$PEER_IP")
            run_case "$role" "$case_dir" "udp port 4791 or tcp port $port" 5
            flows=$(flows_of "$case_dir/inspect.txt")
            res=PASS
            if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ "$flows" -lt 2 ]; then
                res=FAIL; FAILS=$((FAILS + 1))
            fi
            printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "$tool exec $tag" "$dir" "$t" "$size" "$res" \
                "$(figures "$case_dir/theirs.log") [rc=$rc_theirs]" \
                "$(figures "$case_dir/ours.log") [rc=$rc_ours]" \
                "$(tail -1 "$case_dir/inspect.txt"); flows=$flows [rc=$rc_insp]"
        done
    done
    for tool in $DROPIN_PERFTEST; do
        for role in $ROLES; do
            N=$((N + 1)); port=$((PORT_BASE + N))
            case_dir="$OUT/dropin-loss$loss-$tool-$role"
            pf="-n 200 -p $port"
            case $tool in *_bw) [ "$tool" = atomic_bw ] || pf="$pf -s 4096" ;; esac
            # Under loss a 16-message window: go-back-N resends whole windows.
            [ "$loss" != 0 ] && case $tool in *_bw) pf="$pf -t 16" ;; esac
            theirs_srv="timeout $CASE_TIMEOUT ib_$tool -d $(peer_dev) -x $(peer_gidx) -F $pf"
            theirs_cli="$theirs_srv $HOST_IP"
            ours_srv=("${ours_exec[@]}" "ib_$tool" -d "$OUR_DEV" -x 0 -F $pf)
            ours_cli=("${ours_srv[@]}" "$PEER_IP")
            run_case "$role" "$case_dir" "udp port 4791 or tcp port $port" 5
            rt=$(row "$case_dir/theirs.log"); ro=$(row "$case_dir/ours.log")
            flows=$(flows_of "$case_dir/inspect.txt")
            res=PASS
            if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ -z "$rt$ro" ] \
                || [ "$flows" -lt 2 ]; then
                res=FAIL; FAILS=$((FAILS + 1))
            fi
            printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "ib_$tool exec $tag" "$dir" rc - "$res" \
                "$rt [rc=$rc_theirs]" "$ro [rc=$rc_ours]" "$(tail -1 "$case_dir/inspect.txt"); flows=$flows [rc=$rc_insp]"
        done
    done
    [ "$loss" != 0 ] && netem_off
    LOSSY=0
done

# --- librdmacm's tools on our side, over the drop-in librdmacm (roce exec) ----------------
# rping (-v -C 10: per ping SEND, READ, SEND, WRITE, SEND), udaddy (SIDR, then UD datagrams),
# ucmatose (RC connection, SENDs), rdma_server/rdma_client (rdma_create_ep, one SEND each way),
# rdma_xserver/rdma_xclient (-c r: rdma_create_ep with an RC QP, one SEND), cmtime
# (CMTIME_CONNS connections with program-managed QPs set up and torn down, step by step) and
# perftest's eight tools with -R (TOOL_R), the same binary on both ends, both roles. A case
# passes when both exit 0, the tool's own success lines are in both logs, the capture holds CM
# MADs and every ICRC is valid. Then again with `tc netem loss L%` on the peer's egress
# (DROPIN_CM_LOSSES), with the cases of DROPIN_LOSS_CM (not udaddy: UD has no recovery), and
# the rsockets cases below. (Debian's perftest client with -R does not retry a connection its
# server is not yet listening for: see docs/interop.md.)
#
# rsockets: their rstream/riostream (Linux librdmacm rsockets) against the same program on our
# drop-in libraries (`roce exec`): blocking with data verified, asynchronous (rpoll), and
# riostream's direct placement (riomap/riowrite).
DROPIN_CM=${DROPIN_CM-rping udaddy ucmatose rdma_server rdma_xserver cmtime write_bw_R read_bw_R send_bw_R atomic_bw_R write_lat_R read_lat_R send_lat_R atomic_lat_R}
DROPIN_LOSS_CM=${DROPIN_LOSS_CM-$(echo " $DROPIN_CM " | sed 's/ udaddy / /')}
DROPIN_CM_LOSSES=${DROPIN_CM_LOSSES-0 1}
CMTIME_CONNS=${CMTIME_CONNS:-50}
CMTIME_SERVE=${CMTIME_SERVE:-60}
RSTREAM_ROLES=${RSTREAM_ROLES-$ROLES}
for loss in $DROPIN_CM_LOSSES; do
    if [ "$loss" != 0 ]; then
        peer_loss "$loss" "$OUT/dropin-cm-netem-$loss.log" librdmacm || break
        cms=$DROPIN_LOSS_CM; tag=" loss=$loss%"; LOSSY=1
    else
        cms=$DROPIN_CM; tag=""; LOSSY=0
    fi
    for c in $cms; do
        for role in $ROLES; do
            N=$((N + 1)); port=$((PORT_BASE + N))
            case_dir="$OUT/dropin-cm-loss$loss-$c-$role"
            # srv: the server's command, @B@ standing for its own address; cli: the client's,
            # @S@ standing for the server's address; ok_srv / ok_cli: a line each side must print
            # (a count for rping; '' for none). serve: seconds the server runs until it is
            # stopped (cmtime's runs until killed), its exit status 124 then counting as success.
            serve=""
            case $c in
            rping) srv="rping -s -a 0.0.0.0 -p $port -C $RPING_COUNT -v"
                   cli="rping -c -a @S@ -p $port -C $RPING_COUNT -v"
                   ok_srv="server ping data"; ok_cli="^ping data" ;;
            udaddy) srv="udaddy -C 10 -S 100"; cli="udaddy -s @S@ -C 10 -S 100"   # port 7174
                   ok_srv="data transfers complete"; ok_cli=$ok_srv ;;
            ucmatose) srv="ucmatose -C 10"; cli="ucmatose -s @S@ -C 10"          # port 7471
                   ok_srv="data transfers complete"; ok_cli=$ok_srv ;;
            rdma_server) srv="rdma_server -p $port"; cli="rdma_client -s @S@ -p $port"
                   ok_srv="rdma_server: end 0"; ok_cli="rdma_client: end 0" ;;
            rdma_xserver) srv="rdma_xserver -p $port -c r"; cli="rdma_xclient -s @S@ -p $port -c r"
                   ok_srv="rdma_xserver: end 0"; ok_cli="rdma_xclient: end 0" ;;
            cmtime) srv="cmtime -b @B@ -p $port -c $CMTIME_CONNS"; cli="cmtime -s @S@ -p $port -c $CMTIME_CONNS"
                   serve=$CMTIME_SERVE; ok_srv=""; ok_cli="^disconnect *:" ;;
            *_R)   tool=${c%_R}
                   case $tool in write_bw|read_bw|send_bw) sz=4096 ;; atomic_*) sz=8 ;; *) sz=2 ;; esac
                   srv="ib_$tool -R -s $sz -n 200 -p $port"
                   # Under loss a 16-message window: go-back-N resends whole windows.
                   [ "$loss" != 0 ] && case $tool in *_bw) srv="$srv -t 16" ;; esac
                   cli="$srv @S@"; ok_cli="^ *$sz +200 "; ok_srv=$ok_cli
                   # READ and atomic latency: only the client measures; its server
                   # prints the exchange.
                   case $tool in read_lat|atomic_lat) ok_srv="remote address" ;; esac ;;
            *) echo "unknown DROPIN_CM case $c" >&2; continue ;;
            esac
            dev_t=""; dev_o=""
            case $c in *_R) dev_t="-d $(peer_dev)"; dev_o="-d $OUR_DEV" ;; esac
            t_srv=${srv//@B@/$PEER_IP}; o_srv=${srv//@B@/$HOST_IP}
            if [ -n "$serve" ]; then
                theirs_srv="timeout $serve $t_srv; [ \$? -eq 124 ]"
                ours_srv=("${ours_exec[@]}" timeout "$serve" $o_srv)
            else
                theirs_srv="timeout $CASE_TIMEOUT ${t_srv/ -R/ -R $dev_t}"
                ours_srv=("${ours_exec[@]}" ${o_srv/ -R/ -R $dev_o})
            fi
            theirs_cli="timeout $CASE_TIMEOUT ${cli//@S@/$HOST_IP}"; theirs_cli=${theirs_cli/ -R/ -R $dev_t}
            c_o=${cli//@S@/$PEER_IP}
            ours_cli=("${ours_exec[@]}" ${c_o/ -R/ -R $dev_o})
            run_case "$role" "$case_dir" "udp port 4791" 8
            [ -n "$serve" ] && [ "$role" = our-server ] && [ "$rc_ours" -eq 124 ] && rc_ours=0
            if [ "$role" = our-client ]; then lo=$ok_cli; lt=$ok_srv; else lo=$ok_srv; lt=$ok_cli; fi
            want=1; [ "$c" = rping ] && want=$RPING_COUNT
            no=$want; [ -n "$lo" ] && no=$(grep -cE "$lo" "$case_dir/ours.log")
            nt=$want; [ -n "$lt" ] && nt=$(grep -cE "$lt" "$case_dir/theirs.log")
            cm=$(grep -c " CM " "$case_dir/inspect.txt" || true)
            res=PASS
            if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ "$no" -lt "$want" ] \
                || [ "$nt" -lt "$want" ] || [ "$cm" -lt 2 ]; then
                res=FAIL; FAILS=$((FAILS + 1))
            fi
            printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "$c exec$tag" "$dir" - - "$res" \
                "$nt ok lines [rc=$rc_theirs]" "$no ok lines [rc=$rc_ours]" \
                "$(tail -1 "$case_dir/inspect.txt"); CM MADs=$cm [rc=$rc_insp]"
        done
    done

    # --- rsockets: rstream and riostream over librdmacm's rsocket protocol -------------------
    for role in $RSTREAM_ROLES; do
        for pm in "rstream -T b -T v -S 65536 -C 50" "rstream -T a -S 4096 -C 200" \
            "riostream -T b -T v -S 65536 -C 20"; do
            prog=${pm%% *}; mode=${pm#* }
            N=$((N + 1)); port=$((PORT_BASE + N))
            case_dir="$OUT/$prog-loss$loss-$role-$N"
            rf="-p $port $mode"
            theirs_srv="timeout $CASE_TIMEOUT $prog -b $PEER_IP $rf"
            theirs_cli="timeout $CASE_TIMEOUT $prog -s $HOST_IP $rf"
            ours_srv=("$ROCE" exec --addr "$HOST_IP" -- "$prog" -b "$HOST_IP" $rf)
            ours_cli=("$ROCE" exec --addr "$HOST_IP" -- "$prog" -s "$PEER_IP" $rf)
            run_case "$role" "$case_dir" "udp port 4791" 5
            imm=$(grep -c "WRITE_ONLY_WITH_IMMEDIATE\|WRITE_LAST_WITH_IMMEDIATE" "$case_dir/inspect.txt" || true)
            rt=$(grep '^custom' "$case_dir/theirs.log" | awk '{print $2, $3}')
            ro=$(grep '^custom' "$case_dir/ours.log" | awk '{print $2, $3}')
            res=PASS
            if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ] || [ -z "$rt" ] \
                || [ "$rt" != "$ro" ] || [ "$imm" -eq 0 ]; then
                res=FAIL; FAILS=$((FAILS + 1))
            fi
            printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "$prog ${mode%% -S*}$tag" "$dir" rc \
                "$(echo "$mode" | awk '{for (i = 1; i < NF; i++) if ($i == "-S") print $(i + 1)}')" \
                "$res" "$rt [rc=$rc_theirs]" "$ro [rc=$rc_ours]" \
                "$(tail -1 "$case_dir/inspect.txt"); WRITEs with imm=$imm"
        done
    done
    [ "$loss" != 0 ] && netem_off
    LOSSY=0
done

# --- recovery across implementations: loss, duplication, reordering ----------------------
# The peer's egress gets `tc netem loss L duplicate 1%` (its qdisc, on the interface the peer
# runs RoCE on: PEER_IF [eth0]); ours gets the same through `--faults` (the host kernel may
# lack sch_netem) plus 2 % reordering. Cases: rping with -V in both roles (data checked by
# both clients) and perftest's BW tools in both roles. LOSSES='' skips them.
LOSSES=${LOSSES-1 5}
LOSS_OPS=${LOSS_OPS:-write read send}
for loss in $LOSSES; do
    if ! peer_run "tc qdisc replace dev $PEER_IF root netem loss ${loss}% duplicate 1%" \
        >"$OUT/netem-$loss.log" 2>&1; then
        echo "cannot apply netem on the peer (see $OUT/netem-$loss.log); loss cases skipped" >&2
        break
    fi
    trap 'netem_off; cleanup' EXIT
    faults="loss=${loss}%,duplicate=1%,reorder=2%,seed=$loss"
    for role in $ROLES; do
        for tool in rping $LOSS_OPS; do
            N=$((N + 1)); port=$((PORT_BASE + N))
            case_dir="$OUT/loss$loss-$tool-$role"
            if [ "$tool" = rping ]; then
                name=rping; size=3000
                cf="-p $port -C $RPING_COUNT -S $size -v -V"
                theirs_srv="timeout $CASE_TIMEOUT rping -s -a 0.0.0.0 $cf"
                theirs_cli="timeout $CASE_TIMEOUT rping -c -a $HOST_IP $cf"
                ours_srv=("$ROCE" rping -s -a "$HOST_IP" -p "$port" -v --faults "$faults" --timeout 120)
                ours_cli=("$ROCE" rping -c -a "$PEER_IP" --bind "$HOST_IP" $cf --faults "$faults" --timeout 120)
            else
                name="ib_${tool}_bw"; size=4096
                # A 16-message window: at 1 % random loss go-back-N resends whole
                # windows, and 128 x 4 KiB messages overrun the emulated peer.
                pf="-s $size -n 200 -m 1024 -t 16 -p $port"
                theirs_srv="timeout $CASE_TIMEOUT $name -d $(peer_dev) -x $(peer_gidx) $pf"
                theirs_cli="$theirs_srv $HOST_IP"
                ours_srv=("$ROCE" perf "$tool-bw" --perftest --bind "$HOST_IP" $pf --faults "$faults")
                ours_cli=("${ours_srv[@]}" "$PEER_IP")
            fi
            run_case "$role" "$case_dir" "udp port 4791" 5
            insp=$(tail -1 "$case_dir/inspect.txt")
            res=PASS
            if [ "$rc_ours" -ne 0 ] || [ "$rc_theirs" -ne 0 ] || [ "$rc_insp" -ne 0 ]; then
                res=FAIL; FAILS=$((FAILS + 1))
            fi
            their_fig=$(grep -E "^ *[0-9]+ +[0-9]+ " "$case_dir/theirs.log" | tail -1 | tr -s ' ' | cut -c1-40)
            our_fig=$(grep -E "^ *[0-9]+ +[0-9]+ " "$case_dir/ours.log" | tail -1 | tr -s ' ' | cut -c1-40)
            [ "$tool" = rping ] && their_fig="$(grep -c 'ping data' "$case_dir/theirs.log") pings" \
                && our_fig="$(grep -c 'ping data' "$case_dir/ours.log") pings"
            printf '%-17s %-10s %-4s %6s %-6s %-44s %-44s %s\n' "$name loss=$loss%" "$dir" rc "$size" \
                "$res" "$their_fig [rc=$rc_theirs]" "$our_fig [rc=$rc_ours]" "$insp [rc=$rc_insp]"
        done
    done
    netem_off
done

echo "$((N - FAILS))/$N cases passed; logs and captures in $OUT"
[ $FAILS -eq 0 ]
