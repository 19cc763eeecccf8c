#!/bin/bash
# Performance side by side, inside one lab VM, in one run: perftest over the
# kernel's rxe (server and client in the VM, over its own IPv4 address) and
# `roce perf --loopback` over this stack (our binary copied into the VM),
# same sizes. Prints one table row per test. Two more columns for context: our
# stack in process (`--backend fabric`: both ends' packets handed over in
# memory, as rxe hands packets for its own address over inside the kernel),
# and for latency the floor of any stack over UDP sockets in that VM (a bare
# UDP ping-pong between two threads, the udp_ceiling bench copied in).
#
#   cargo build --release -p roce-cli && bash interop/side-by-side.sh
#
# Then (WHAT=dropin, or both by default) the same Debian perftest binaries twice in the
# same VM and boot: over rxe, and over this stack's drop-in libibverbs.so.1 (copied into the
# share, on LD_LIBRARY_PATH), server and client in the VM each time, alternating, ROUNDS
# rounds. Over rxe they run on the VM's address ($IP, -d $DEV -x $GIDX); over the library
# on loopback (-d roce_lo -x 0: the server takes 127.0.0.1, the client 127.0.0.2) with
# ROCE_PORT=4792, since rxe holds UDP port 4791 on every address of the VM.
#
# With WHAT=cmtime: Debian's cmtime (librdmacm's connection set-up rate) the same way, over rxe
# and over the drop-in libibverbs and librdmacm (server on 127.0.0.1, client on 127.0.0.2 by
# ROCE_ADDR), alternating, ROUNDS rounds of CONNS connections; prints each step's us / conn.
#
# Variables: WHAT [roce-perf dropin; or cmtime], ROUNDS [3] (dropin, cmtime), CONNS [50] (cmtime), TRIES [3], LAB_DIR [interop/lab], LAB [/var/tmp/roce-lab], PEER [vmA],
# SHARE [$LAB/run/$PEER: the directory the VM sees as /lab],
# DURATION [5] seconds per BW test, ITERS [2000] latency samples,
# ROCE [target/release/roce], PEER_IP [10.77.0.11] (the VM's address), DROPIN_ENV [none: more variables for
# the drop-in runs, e.g. ROCE_SHM=0]. Our side uses UDP port 4792 on 127.0.0.1/2
# because rxe holds 4791 on every address of the VM.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$HERE/lab}
LAB=${LAB:-/var/tmp/roce-lab}
PEER=${PEER:-vmA}
SHARE=${SHARE:-$LAB/run/$PEER}
DURATION=${DURATION:-5}
ITERS=${ITERS:-2000}
ROCE=${ROCE:-$HERE/../target/release/roce}
PEER_IP=${PEER_IP:-10.77.0.11}
WHAT=${WHAT:-roce-perf dropin}
ROUNDS=${ROUNDS:-3}
[ -x "$ROCE" ] || { echo "no roce binary at $ROCE" >&2; exit 2; }

bash "$LAB_DIR/net.sh" up >/dev/null 2>&1
if ! TIMEOUT=60 bash "$LAB_DIR/peer.sh" exec "$PEER" true >/dev/null 2>&1; then
    bash "$LAB_DIR/peer.sh" start "$PEER" >/dev/null || { echo "the VM did not start" >&2; exit 2; }
fi
cp "$ROCE" "$SHARE/roce-side-by-side"
# The bench binary (cargo bench -p roce-io --bench udp_ceiling --no-run).
CEIL=
for f in "$HERE"/../target/release/deps/udp_ceiling-*; do   # the newest build of it
    case $f in *.d) continue ;; esac
    [ -x "$f" ] || continue
    if [ -z "$CEIL" ] || [ "$f" -nt "$CEIL" ]; then CEIL=$f; fi
done
[ -n "$CEIL" ] && cp "$CEIL" "$SHARE/udp-ceiling"

run() { TIMEOUT=300 bash "$LAB_DIR/peer.sh" exec "$PEER" "$1"; }
P="-d \$DEV -x \$GIDX -F"
pair() { # port, command: server and client over rxe in the guest
    # Each pair has its own TCP port: perftest's server cannot bind a port
    # still in TIME_WAIT from the pair before (it printed no table then).
    # The emulated guest can take seconds to start the server: the client
    # goes once the server's port is listening.
    run "timeout 120 $2 -p $1 > /tmp/sbs.srv 2>&1 &
         for i in \$(seq 60); do ss -ltn | grep -q ':$1 ' && break; sleep 0.5; done
         timeout 120 $2 -p $1 $PEER_IP; wait"
}
ours() { run "timeout 200 /lab/roce-side-by-side perf $1 --loopback --roce-port 4792"; }
in_process() { run "timeout 200 /lab/roce-side-by-side perf $1 --loopback --backend fabric"; }
udp_floor() { # the bare UDP ping-pong's typical half round trip (connected send/recv: the first of the bench's two)
    [ -n "$CEIL" ] || return 0
    run "timeout 200 /lab/udp-ceiling 0.2" | sed -n 's/.*typical \([0-9.]*\) us.*/\1/p' | head -1
}

bw_row() { # perftest BW table -> "avg Gb/s" (none when it is 0: perftest could not calibrate its clock)
    awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/{v=$4} END{if (v + 0 > 0) print v}'
}
lat_row() { # perftest latency table -> "t_typical us"
    awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/{v=$5} END{print v}'
}

# A run that prints no table, or no figure (perftest prints "inf" or 0.00 when
# it cannot calibrate its cycle counter against the emulated CPU's clock:
# "Correlation coefficient r^2 ... < 0.9", more often on a busy host), is tried
# up to TRIES [3] times. Raw outputs go to $LOGS.
LOGS=${LOGS:-/tmp/side-by-side-logs}; mkdir -p "$LOGS"
measure() { # name, parser, command...: the figure, retried if missing
    local name=$1 parse=$2 v; shift 2
    for try in $(seq "${TRIES:-3}"); do
        "$@" > "$LOGS/$name.$try.log" 2>&1
        v=$($parse < "$LOGS/$name.$try.log")
        [ -n "$v" ] && break
    done
    echo "$v"
}
want() { case " $WHAT " in *" $1 "*) return 0 ;; esac; return 1; }

if want roce-perf; then
    echo "perftest over rxe vs roce perf over this stack, inside $PEER ($(run 'uname -r'), emulated CPU)"
    printf '%-22s %-14s %-14s %-16s %-10s %s\n' test rxe+perftest "roce perf" "in process" "UDP floor" unit
    w_rxe=$(measure rxe-write-bw bw_row pair 18701 "ib_write_bw $P -s 65536 -D $DURATION --report_gbits")
    w_us=$(measure ours-write-bw bw_row ours "write-bw -s 65536 -D $DURATION --report_gbits")
    w_in=$(measure ours-fabric-write-bw bw_row in_process "write-bw -s 65536 -D $DURATION --report_gbits")
    printf '%-22s %-14s %-14s %-16s %-10s %s\n' "write-bw -s 65536" "$w_rxe" "$w_us" "$w_in" - "Gb/s (BW average)"
    s_rxe=$(measure rxe-send-lat lat_row pair 18702 "ib_send_lat $P -s 2 -n $ITERS")
    s_us=$(measure ours-send-lat lat_row ours "send-lat -s 2 -n $ITERS")
    s_in=$(measure ours-fabric-send-lat lat_row in_process "send-lat -s 2 -n $ITERS")
    floor=$(udp_floor)
    printf '%-22s %-14s %-14s %-16s %-10s %s\n' "send-lat -s 2" "$s_rxe" "$s_us" "$s_in" "${floor:--}" "us (t_typical)"
    r_rxe=$(measure rxe-read-lat lat_row pair 18703 "ib_read_lat $P -s 2 -n $ITERS")
    r_us=$(measure ours-read-lat lat_row ours "read-lat -s 2 -n $ITERS")
    r_in=$(measure ours-fabric-read-lat lat_row in_process "read-lat -s 2 -n $ITERS")
    # A READ's figure is a whole round trip: twice the ping-pong's half.
    r_floor=$(awk -v f="${floor:-}" 'BEGIN { if (f != "") printf "%.2f", 2 * f }')
    printf '%-22s %-14s %-14s %-16s %-10s %s\n' "read-lat -s 2" "$r_rxe" "$r_us" "$r_in" "${r_floor:--}" "us (t_typical)"
fi

# drop-in / rxe, two decimals; "-" when either figure is missing.
ratio() {
    awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a + 0 > 0 && b != "") printf "%.2f", b / a; else printf "-" }'
}

# Lines "test|ratio" in, one line per test out: the median of its ratios.
medians() {
    awk -F'|' '$2 != "-" { n[$1]++; v[$1, n[$1]] = $2; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
        END {
            for (i = 1; i <= k; i++) {
                t = order[i]; m = n[t]
                for (x = 1; x <= m; x++) for (y = x + 1; y <= m; y++)
                    if (v[t, y] + 0 < v[t, x] + 0) { s = v[t, x]; v[t, x] = v[t, y]; v[t, y] = s }
                med = (m % 2) ? v[t, (m + 1) / 2] : (v[t, m / 2] + v[t, m / 2 + 1]) / 2
                printf "median  %-22s drop-in / rxe %.2f over %d rounds\n", t, med, m
            }
        }'
}

if want dropin; then
    # The library (and whatever else roce exec puts beside it) into the share.
    LIBDIR=$("$ROCE" exec --print-path) || { echo "no drop-in library (cargo build --release -p roce-cli)" >&2; exit 2; }
    mkdir -p "$SHARE/dropin"
    cp -L "$LIBDIR"/*.so.1 "$SHARE/dropin/"
    D="env LD_LIBRARY_PATH=/lab/dropin ROCE_DEVICES=lo ROCE_PORT=4792 ${DROPIN_ENV:-}"
    PD="-d roce_lo -x 0 -F"
    dpair() { # port, command: server and client over the library on the VM's loopback
        run "$D timeout 120 $2 -p $1 > /tmp/sbs.srv 2>&1 &
             for i in \$(seq 60); do ss -ltn | grep -q ':$1 ' && break; sleep 0.5; done
             $D timeout 120 $2 -p $1 127.0.0.1; wait"
    }
    echo
    echo "Debian's perftest over rxe vs the same binaries over the drop-in libibverbs, inside $PEER, alternating"
    printf '%-6s %-22s %-12s %-12s %-8s %s\n' round test rxe drop-in ratio unit
    rows=$(mktemp)
    port=18800
    for r in $(seq "$ROUNDS"); do
        for t in "ib_write_bw -s 65536 -D $DURATION|bw_row|MB/s (BW average)" \
                 "ib_send_lat -s 2 -n $ITERS|lat_row|us (t_typical)" \
                 "ib_read_lat -s 2 -n $ITERS|lat_row|us (t_typical)"; do
            cmd=${t%%|*}; rest=${t#*|}; parse=${rest%%|*}; unit=${rest#*|}
            name=$(echo "$cmd" | cut -d' ' -f1)
            port=$((port + 1)); a=$(measure "dropin-rxe-$name.$r" "$parse" pair "$port" "$cmd $P")
            port=$((port + 1)); b=$(measure "dropin-lib-$name.$r" "$parse" dpair "$port" "$cmd $PD")
            ratio=$(ratio "$a" "$b")
            printf '%-6s %-22s %-12s %-12s %-8s %s\n' "$r" "${cmd% -[Dn] *}" "${a:--}" "${b:--}" "$ratio" "$unit"
            echo "${cmd% -[Dn] *}|$ratio" >> "$rows"
        done
    done
    medians < "$rows"
    rm -f "$rows"
fi

if want cmtime; then
    LIBDIR=$("$ROCE" exec --print-path) || { echo "no drop-in library (cargo build --release -p roce-cli)" >&2; exit 2; }
    mkdir -p "$SHARE/dropin"
    cp -L "$LIBDIR"/*.so.1 "$SHARE/dropin/"
    CONNS=${CONNS:-50}
    D="env LD_LIBRARY_PATH=/lab/dropin ROCE_DEVICES=lo ROCE_PORT=4792 ${DROPIN_ENV:-}"
    cpair() { # port, server's environment, server's address, client's environment
        # cmtime's server runs until killed; nothing shows its rdma_cm listen, so the
        # client goes 5 s after it starts.
        run "$2 timeout 300 cmtime -b $3 -p $1 -c $CONNS > /tmp/sbs.srv 2>&1 & s=\$!
             sleep 5; $4 timeout 240 cmtime -s $3 -p $1 -c $CONNS; r=\$?; kill \$s; wait; exit \$r"
    }
    steps() { # cmtime's table -> "connect/disconnect us per connection"
        awk -F: '/^connect *:/{split($2, a, " "); c=a[4]} /^disconnect *:/{split($2, a, " "); d=a[4]}
                 END{if (c != "") print c "/" d}'
    }
    echo
    echo "Debian's cmtime -c $CONNS over rxe vs over the drop-in libraries, inside $PEER, alternating"
    printf '%-6s %-22s %-22s %s\n' round rxe drop-in "unit (connect/disconnect)"
    port=18900
    for r in $(seq "$ROUNDS"); do
        port=$((port + 1)); a=$(measure "cmtime-rxe.$r" steps cpair "$port" "" "$PEER_IP" "")
        port=$((port + 1)); b=$(measure "cmtime-lib.$r" steps cpair "$port" "$D ROCE_ADDR=127.0.0.1" 127.0.0.1 "$D ROCE_ADDR=127.0.0.2")
        printf '%-6s %-22s %-22s %s\n' "$r" "${a:--}" "${b:--}" "us / conn"
    done
fi
