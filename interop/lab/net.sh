#!/bin/bash
# The lab network, inside its own network namespace so that nothing touches
# the host's interfaces:
#
#   netns $NS:  bridge $BRIDGE = $HOST_CIDR  (our side: run the stack under
#               test with `ip netns exec $NS ...`; it binds 10.77.0.1)
#               tap0 .. tap$((NTAPS-1)) on the bridge, one per VM
#               (vmA 10.77.0.11 on tap0, vmB 10.77.0.12 on tap1)
#
#   net.sh up | down | show        (up is idempotent)
set -euo pipefail
. "$(dirname "$0")/lab.env"
need_root
in_ns() { ip netns exec "$NS" "$@"; }

case "${1:-up}" in
up)
    ip netns list | grep -qw "$NS" || ip netns add "$NS"
    in_ns ip link set lo up
    # No IPv6: keeps captures free of neighbour discovery and router solicitations.
    in_ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    if ! in_ns ip link show "$BRIDGE" >/dev/null 2>&1; then
        in_ns ip link add "$BRIDGE" type bridge stp_state 0 forward_delay 0
        in_ns ip addr add "$HOST_CIDR" dev "$BRIDGE"
    fi
    in_ns ip link set "$BRIDGE" up
    for i in $(seq 0 $((NTAPS - 1))); do
        if ! in_ns ip link show "tap$i" >/dev/null 2>&1; then
            in_ns ip tuntap add dev "tap$i" mode tap
            in_ns ip link set "tap$i" master "$BRIDGE"
        fi
        in_ns ip link set "tap$i" up
    done
    ;;
down)
    ip netns del "$NS" 2>/dev/null || true
    ;;
show)
    in_ns ip -br link
    in_ns ip -br addr
    ;;
*)
    echo "usage: $0 up|down|show" >&2
    exit 2
    ;;
esac
