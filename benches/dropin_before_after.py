#!/usr/bin/env python3
"""Unmodified perftest over two builds of the drop-in libibverbs.so.1,
before and after a change, in one sitting, alternating, two processes on
one host (issue 32 item 5: the same-host shared-memory path after "one
device per host").

    python3 benches/dropin_before_after.py BEFORE_LIB_DIR AFTER_LIB_DIR [ROUNDS] [--json] [--only=TEXT]

Each LIB_DIR holds libibverbs.so.1 (and librdmacm.so.1), e.g. symlinks
to target/release/libibverbs.so of a release build of each tree. Every
run is exactly what a user types: LD_LIBRARY_PATH=LIB_DIR
ROCE_DEVICES=lo, no ROCE_ADDR (the other ROCE_* variables are cleared),
server `ib_write_lat -s 2 -n 20000 -p PORT`, client the same and
127.0.0.1 (for "write_lat 2 B, ACKs at once" the server has
ROCE_ACK_DELAY=0: it acknowledges every packet at once, as the kernel's
rxe and RoCE NICs do). --only=TEXT runs the test of that name, or if
none, those whose name holds TEXT; several --only add up.
Within a round the two builds take turns, before-after then
after-before (ABBA, also flipped from round to round) so drift of a
shared machine falls on both alike.

Prints one line per measurement, then per test the medians, their ratio
(after / before; above 1 is faster for bandwidth, slower for latency),
the median of the per-round ratios and each side's range. A run that
fails (exit status, timeout, no result row) prints why and counts as
missing. With --json the lines go to stderr and a JSON document to
stdout.

Other processes of the same user on 127.0.0.1 share the "after" build's
address and host table (and the kernel may hand them our datagrams to
forward), while the "before" build moves away from them along 127/8;
each line shows how many UDP sockets held the RoCE port (4791) just
before the run. For a host of one's own on a shared machine, run the
whole script in a private network namespace (root):
`unshare -n sh -c 'ip link set lo up && python3 benches/dropin_before_after.py ...'`.
"""
import json
import os
import statistics
import sys
import time

from benchlib import figure, free_port, pair, roce_port_holders, tail



ALL_TESTS = TESTS = [
    # name, perftest tool, args, result column, unit, higher-is-better[, the server's extra env]
    ("write_lat 2 B", "ib_write_lat", ["-s", "2", "-n", "20000"], 4, "t_typical us", False),
    ("write_lat 2 B, ACKs at once", "ib_write_lat", ["-s", "2", "-n", "20000"], 5, "t_avg us", False,
     {"ROCE_ACK_DELAY": "0"}),
    ("write_bw 64 KiB", "ib_write_bw", ["-s", "65536", "-D", "2"], 3, "MB/s avg", True),
    ("send_bw 8 B", "ib_send_bw", ["-s", "8", "-D", "2"], 4, "Mpps", True),
    ("send_lat 2 B", "ib_send_lat", ["-s", "2", "-n", "20000"], 4, "t_typical us", False),
]

LISTEN_TIMEOUT = 20  # s for the server to listen on its TCP port
CLIENT_TIMEOUT = 120  # s for the client's whole run
SERVER_TIMEOUT = 20  # s for the server to end after its client

JSON = "--json" in sys.argv
OUT = sys.stderr if JSON else sys.stdout


def say(*a):
    print(*a, file=OUT, flush=True)


def run_pair(tool, args, env, server_extra=None):
    """Runs a perftest server and client; returns (client stdout, None) or (None, why)."""
    port = str(free_port())
    server_env = dict(env, **server_extra) if server_extra else None
    return pair([tool] + args + ["-p", port], [tool] + args + ["-p", port, "127.0.0.1"], int(port), env,
                LISTEN_TIMEOUT, CLIENT_TIMEOUT, SERVER_TIMEOUT, server_env)


def load():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def env_for(lib):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCE_")}
    env["LD_LIBRARY_PATH"] = lib
    env["ROCE_DEVICES"] = "lo"
    return env


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def main():
    global TESTS
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = [a for a in sys.argv[1:] if a.startswith("--")]
    if len(args) not in (2, 3) or any(a != "--json" and not a.startswith("--only=") for a in opts):
        sys.exit(__doc__)
    only = [o[len("--only="):] for o in opts if o.startswith("--only=")]
    if only:
        # A test's own name picks it alone; other text, every test holding it.
        names = {t[0] for t in TESTS}
        TESTS = [t for t in TESTS if any(t[0] == w if w in names else w and w in t[0] for w in only)]
        if not TESTS:
            sys.exit(f"--only: no test named or holding {only}; the tests: {[t[0] for t in ALL_TESTS]}")
    libs = {"before": os.path.abspath(args[0]), "after": os.path.abspath(args[1])}
    rounds = int(args[2]) if len(args) == 3 else 5
    for side, d in libs.items():
        so = os.path.join(d, "libibverbs.so.1")
        if not os.path.exists(so):
            sys.exit(f"{side}: no libibverbs.so.1 in {d}")
        say(f"{side}: {d} (libibverbs.so.1 -> {os.path.realpath(so)})")
    say(f"{rounds} rounds, {os.cpu_count()} CPUs, load {load()} at start")
    envs = {side: env_for(d) for side, d in libs.items()}

    results = {t[0]: {"before": [None] * rounds, "after": [None] * rounds} for t in TESTS}
    failures = []
    start = time.monotonic()
    for r in range(rounds):
        for i, (name, tool, targs, col, unit, _, *extra) in enumerate(TESTS):
            order = ("before", "after") if (r + i) % 2 == 0 else ("after", "before")
            for side in order:
                held = roce_port_holders()
                out, why = run_pair(tool, targs, envs[side], extra[0] if extra else None)
                value = None
                if out is not None:
                    try:
                        value = figure(out, col)
                    except (RuntimeError, ValueError, IndexError) as e:
                        why = f"no figure: {str(e).splitlines()[0]}\n{tail(out)}"
                if value is None:
                    failures.append({"round": r + 1, "test": name, "side": side, "why": why, "port_holders": held})
                    say(f"{name} {unit}: round {r + 1}: {side:6} FAILED (4791 held by {held}): {why}")
                else:
                    results[name][side][r] = value
                    say(f"{name} {unit}: round {r + 1}: {side:6} {value:.3f}  (load {load()}, 4791 held by {held})")
    elapsed = time.monotonic() - start

    rows = []
    for name, tool, targs, col, unit, higher, *_ in TESTS:
        b, a = results[name]["before"], results[name]["after"]
        mb, ma = median(b), median(a)
        paired = [y / x for x, y in zip(b, a) if x and y is not None]
        rows.append({
            "test": name, "tool": tool, "args": targs, "unit": unit, "higher_is_better": higher,
            "before": b, "after": a, "median_before": mb, "median_after": ma,
            "ratio": (ma / mb) if mb and ma is not None else None,
            "paired_ratio_median": median(paired),
            "range_before": [min(x for x in b if x is not None), max(x for x in b if x is not None)] if mb is not None else None,
            "range_after": [min(x for x in a if x is not None), max(x for x in a if x is not None)] if ma is not None else None,
            "n_before": sum(x is not None for x in b), "n_after": sum(x is not None for x in a),
        })

    say(f"\n{rounds} rounds in {elapsed / 60:.1f} min, load {load()} at end; ratio = after / before")
    head = f"{'test':<40} {'n b/a':>5} {'median before':>13} {'median after':>12} {'ratio':>6} {'paired':>6}  {'before min-max':>17}  {'after min-max':>17}"
    say(head)
    say("-" * len(head))
    for row in rows:
        rb = "-" if row["range_before"] is None else f"{fmt(row['range_before'][0])}-{fmt(row['range_before'][1])}"
        ra = "-" if row["range_after"] is None else f"{fmt(row['range_after'][0])}-{fmt(row['range_after'][1])}"
        label = f"{row['test']} {row['unit']} ({'hi' if row['higher_is_better'] else 'lo'})"
        say(f"{label:<40} {row['n_before']}/{row['n_after']:<3} {fmt(row['median_before']):>13} {fmt(row['median_after']):>12} "
            f"{fmt(row['ratio'], 2):>6} {fmt(row['paired_ratio_median'], 2):>6}  {rb:>17}  {ra:>17}")
    say("(hi: higher is better, lo: lower is better; paired: median of the per-round after/before ratios)")
    if failures:
        say(f"{len(failures)} failed run(s), counted as missing")

    if JSON:
        json.dump({"libs": libs, "rounds": rounds, "elapsed_s": round(elapsed, 1), "cpus": os.cpu_count(),
                   "tests": rows, "failures": failures}, sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
