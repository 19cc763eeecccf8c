#!/bin/bash
# Two builds of the drop-in libibverbs against the kernel's rxe, alternating,
# in one boot of the lab VM: perftest's latency tools with rxe in the VM on
# one end and the host's unmodified perftest over a build's library (under
# `roce exec`, in netns rxelab) on the other, either role. For a change of
# the library's scheduling or transport, whose effect a peer that behaves as
# a NIC (it acknowledges every packet at once) shows and a peer of this
# stack does not.
#
#   cargo build --release -p roce-cli
#   bash interop/ab-against-rxe.sh BEFORE_LIB_DIR AFTER_LIB_DIR [ROUNDS]
#
# Each LIB_DIR holds libibverbs.so.1 and librdmacm.so.1 (copies of a
# release build's). Prints one line per run (tool, role, build, t_typical
# and t_avg in µs), then each case's medians. Runs as root (the lab).
#
# Variables: TOOLS [ib_write_lat ib_send_lat], ROLES [client server] (ours),
# ITERS [3000], LAB_DIR [interop/lab], PEER [vmA], PEER_IP [10.77.0.11],
# HOST_IP [10.77.0.1], ROCE [target/release/roce].
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$HERE/lab}
PEER=${PEER:-vmA}
PEER_IP=${PEER_IP:-10.77.0.11}
HOST_IP=${HOST_IP:-10.77.0.1}
ROCE=${ROCE:-$HERE/../target/release/roce}
TOOLS=${TOOLS:-ib_write_lat ib_send_lat}
ROLES=${ROLES:-client server}
ITERS=${ITERS:-3000}
[ $# -ge 2 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
BEFORE=$(cd "$1" && pwd) AFTER=$(cd "$2" && pwd) ROUNDS=${3:-4}
for d in "$BEFORE" "$AFTER"; do
    for l in libibverbs.so.1 librdmacm.so.1; do
        [ -f "$d/$l" ] || { echo "no $l in $d" >&2; exit 2; }
    done
done
[ -x "$ROCE" ] || { echo "no roce binary at $ROCE" >&2; exit 2; }

bash "$LAB_DIR/net.sh" up >/dev/null 2>&1
STARTED=0
if ! TIMEOUT=60 bash "$LAB_DIR/peer.sh" exec "$PEER" true >/dev/null 2>&1; then
    bash "$LAB_DIR/peer.sh" start "$PEER" >/dev/null || { echo "the VM did not start" >&2; exit 2; }
    STARTED=1
fi
OUT=$(mktemp -d)
srv=
cleanup() {
    # Our server, if a run was cut short: $srv is its `timeout`, which
    # passes the signal on. (A job already given to the guest ends by its
    # own timeout, or with the VM when this script started it.)
    [ -n "$srv" ] && kill "$srv" 2>/dev/null
    [ "$STARTED" = 1 ] && bash "$LAB_DIR/peer.sh" stop "$PEER" >/dev/null 2>&1
    rm -rf "$OUT"
}
trap cleanup EXIT
OUR_IF=$(ip netns exec rxelab ip -o -4 addr show | awk -v ip="$HOST_IP" '{split($4, a, "/")} a[1] == ip {print $2; exit}')
ours() { # LIB ARGS...: the host's perftest over LIB's drop-in, in the lab's namespace
    # (ip and env exec in turn: the process is `timeout`; --foreground
    # keeps it in this script's process group, so Ctrl-C reaches it)
    local lib=$1; shift
    exec ip netns exec rxelab env ROCE_LIB_DIR="$lib" timeout --foreground 90 \
        "$ROCE" exec --devices "roce_${OUR_IF:-br0}" --addr "$HOST_IP" -- "$@" -x 0 2>&1
}
# The result row's t_typical and t_avg (columns 5 and 6): the first line
# after the header that starts with the size.
row() { awk '/#bytes/ {h = 1; next} h && $1 ~ /^[0-9]+$/ && NF >= 6 {print $5, $6; exit}'; }

port=$((10000 + RANDOM % 20000)) # below the ephemeral range (32768 and up)
for r in $(seq "$ROUNDS"); do
    for tool in $TOOLS; do
        for role in $ROLES; do
            order="before after"; [ $(((r + ${#tool}) % 2)) = 1 ] && order="after before"
            for side in $order; do
                lib=$BEFORE; [ "$side" = after ] && lib=$AFTER
                port=$((port + 1))
                args="-s 2 -n $ITERS -p $port"
                if [ "$role" = client ]; then
                    id=$(bash "$LAB_DIR/peer.sh" bg "$PEER" "timeout 90 $tool -d \$DEV -x \$GIDX $args")
                    sleep 2
                    res=$( (ours "$lib" "$tool" $args "$PEER_IP") | row)
                    TIMEOUT=100 bash "$LAB_DIR/peer.sh" wait "$PEER" "$id" >/dev/null 2>&1
                else
                    (ours "$lib" "$tool" $args) > "$OUT/server.log" &
                    srv=$!
                    sleep 2
                    res=$(TIMEOUT=100 bash "$LAB_DIR/peer.sh" exec "$PEER" \
                        "timeout 90 $tool -d \$DEV -x \$GIDX $args $HOST_IP" 2>&1 | row)
                    wait "$srv"; srv=
                fi
                echo "$tool ours=$role $side ${res:-FAILED}" | tee -a "$OUT/all"
            done
        done
    done
done
echo
echo "medians over $ROUNDS rounds (us): t_typical / t_avg"
python3 - "$OUT/all" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5:
        rows.setdefault((f[0], f[1], f[2]), []).append((float(f[3]), float(f[4])))
for (tool, role, side), v in sorted(rows.items()):
    print(f"{tool:14} {role:12} {side:7} {statistics.median(x for x, _ in v):9.2f} / {statistics.median(y for _, y in v):9.2f}  (n={len(v)})")
EOF
