#!/usr/bin/env python3
"""This stack beside what RDMA middleware does without RDMA, and beside
the machine's own floors, in one sitting, alternating, N rounds; prints
the medians and the ratios the performance targets are stated in
(docs/performance.md, "Side by side with UCX and the machine's limits").

    python3 benches/side_by_side.py [ROUNDS] [--json]

Measured in every round, in an order reversed from round to round:

* UCX's own transports (Debian's ucx-utils): `ucx_perftest -t tag_lat
  -s 8` (p50 one-way latency) and `-t ucp_put_bw -s 65536` (MB/s), with
  UCX_TLS=posix (shared memory) and UCX_TLS=tcp, two processes on
  127.0.0.1.
* The machine's floors: one core copying 64 KiB (memcpy) and two
  processes passing a byte over pipes with blocking reads (the least a
  completion-event ping-pong can cost), from `roce-testkit`'s `floors`
  example; the UDP GSO/GRO ceiling for 4136-byte datagrams and a plain
  UDP ping-pong's half round trip, from roce-io's `udp_ceiling` bench.
* This stack between two processes through the drop-in libibverbs.so.1,
  unmodified perftest (`ib_write_lat -s 2`, `ib_write_bw -s 65536`,
  `ib_send_bw -s 8`) and rdma-core's `ibv_rc_pingpong -e -s 64`
  (completion events); and `roce perf` (`write-lat -s 2`, `write-bw -s
  65536`, `send-bw -s 8`) on loopback, over the same-host path and over
  the kernel's UDP path (`ROCE_SHM=0`).

Needs release builds (`cargo build --release -p roce-cli -p roce-testkit
--example floors`; the script builds them if missing) and the Debian
packages above. A run that fails prints why and counts as missing.
"""
import json
import os
import statistics
import subprocess
import sys

from benchlib import figure, free_port, pair, roce_port_holders, tail

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, "target", "release")
ROCE = os.path.join(RELEASE, "roce")
FLOORS = os.path.join(RELEASE, "examples", "floors")

JSON = "--json" in sys.argv
OUT = sys.stderr if JSON else sys.stdout


def say(*a):
    print(*a, file=OUT, flush=True)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCE_", "UCX_"))}
    env.update(extra)
    return env


def run(cmd, env=None, timeout=120):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{tail(p.stdout + p.stderr)}")
    return p.stdout


def paired(server, client, env, port):
    out, why = pair(server, client, port, env)
    if why:
        raise RuntimeError(why)
    return out


# -- the anchors ---------------------------------------------------------


def ucx(test, size, tls, column):
    """ucx_perftest's "Final:" row: column 1 = latency p50 (us), 4 = MB/s average."""
    port = free_port()
    env = clean_env(UCX_TLS=f"{tls},self")
    n = "200000" if test == "tag_lat" else "20000"
    out = paired(["ucx_perftest", "-p", str(port)],
                 ["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n", n],
                 env, port)
    for line in out.splitlines():
        if line.startswith("Final:"):
            return float(line.split()[1 + column])
    raise RuntimeError("no Final: row in:\n" + tail(out))


def floors():
    d = json.loads(run([FLOORS, "20000"]).strip().splitlines()[-1])
    return {"memcpy": d["memcpy_64k_gb_per_sec"], "pipe": d["pipe_rtt_usec_p50"]}


def udp_ceiling():
    out = run(["cargo", "bench", "-q", "-p", "roce-io", "--bench", "udp_ceiling", "--", "1"], timeout=300)
    gso = half = None
    for line in out.splitlines():
        if "UDP GSO/GRO" in line and "received" in line:
            gso = float(line.split("received")[1].split()[0])
        if "send/recv (connected)" in line:
            half = float(line.split("typical")[1].split()[0])
    if gso is None or half is None:
        raise RuntimeError("no GSO or ping-pong line in:\n" + tail(out, 12))
    return {"gso": gso, "half": half}


# -- this stack ----------------------------------------------------------


def dropin_env():
    lib = run([ROCE, "exec", "--print-path"]).strip()
    return clean_env(LD_LIBRARY_PATH=lib, ROCE_DEVICES="lo")


def perftest(tool, args, col):
    port = free_port()
    base = [tool] + args + ["-p", str(port)]
    return figure(paired(base, base + ["127.0.0.1"], dropin_env(), port), col)


def rc_pingpong_events():
    port = free_port()
    base = ["ibv_rc_pingpong", "-d", "roce_lo", "-g", "0", "-e", "-s", "64", "-n", "5000", "-p", str(port)]
    out = paired(base, base + ["127.0.0.1"], dropin_env(), port)
    for line in out.splitlines():
        if "usec/iter" in line:
            return float(line.split("=")[1].split()[0])
    raise RuntimeError("no usec/iter line in:\n" + tail(out))


def roce_perf(test, args, key, shm=True):
    env = clean_env() if shm else clean_env(ROCE_SHM="0")
    out = run([ROCE, "perf", test, "--loopback", "--json"] + args, env=env)
    return float(json.loads(out.strip().splitlines()[-1])["results"][-1][key])


# name, unit, function; each run once per round.
MEASURES = [
    ("ucx posix tag_lat 8 B", "us p50", lambda: ucx("tag_lat", 8, "posix", 1)),
    ("ucx tcp tag_lat 8 B", "us p50", lambda: ucx("tag_lat", 8, "tcp", 1)),
    ("ucx posix put_bw 64 KiB", "MB/s", lambda: ucx("ucp_put_bw", 65536, "posix", 4)),
    ("ucx tcp put_bw 64 KiB", "MB/s", lambda: ucx("ucp_put_bw", 65536, "tcp", 4)),
    ("floors", None, floors),
    ("udp ceiling", None, udp_ceiling),
    ("ib_write_lat 2 B (drop-in)", "us t_typical", lambda: perftest("ib_write_lat", ["-s", "2", "-n", "20000"], 4)),
    ("ib_write_bw 64 KiB (drop-in)", "MB/s", lambda: perftest("ib_write_bw", ["-s", "65536", "-D", "2"], 3)),
    ("ib_send_bw 8 B (drop-in)", "Mpps", lambda: perftest("ib_send_bw", ["-s", "8", "-D", "2"], 4)),
    ("ibv_rc_pingpong -e 64 B (drop-in)", "us/iter", rc_pingpong_events),
    ("roce perf write-lat 2 B", "us t_typical",
     lambda: roce_perf("write-lat", ["-s", "2", "-n", "20000"], "t_typical_usec")),
    ("roce perf write-bw 64 KiB", "MB/s",
     lambda: roce_perf("write-bw", ["-s", "65536", "-D", "2"], "bw_avg_mb_per_sec")),
    ("roce perf send-bw 8 B", "Mpps", lambda: roce_perf("send-bw", ["-s", "8", "-D", "2"], "msg_rate_mpps")),
    ("roce perf write-lat 2 B, UDP", "us t_typical",
     lambda: roce_perf("write-lat", ["-s", "2", "-n", "20000"], "t_typical_usec", shm=False)),
    ("roce perf write-bw 64 KiB, UDP", "Gbit/s",
     lambda: roce_perf("write-bw", ["-s", "65536", "-D", "2"], "bw_avg_gbit_per_sec", shm=False)),
]

# The targets (issue "Close to the machine's limits"): label, numerator,
# denominator (None: an absolute figure), bound, whether the ratio must
# be at least (True) or at most (False) the bound.
TARGETS = [
    ("same-host WRITE 64 KiB / UCX posix put_bw", "ib_write_bw 64 KiB (drop-in)", "ucx posix put_bw 64 KiB", 0.25, True),
    ("same-host write_lat / UCX posix tag_lat", "ib_write_lat 2 B (drop-in)", "ucx posix tag_lat 8 B", 5.0, False),
    ("same-host 8 B message rate (Mpps)", "ib_send_bw 8 B (drop-in)", None, 3.0, True),
    ("UDP WRITE 64 KiB / GSO ceiling", "roce perf write-bw 64 KiB, UDP", "udp gso Gbit/s", 0.5, True),
    ("UDP write-lat / UDP half round trip", "roce perf write-lat 2 B, UDP", "udp half rtt us", 1.5, False),
    ("completion events / pipe wake-up floor", "ibv_rc_pingpong -e 64 B (drop-in)", "pipe rtt us", 1.2, False),
]


def ensure_built():
    if not (os.path.exists(ROCE) and os.path.exists(FLOORS)):
        say("building release binaries (roce, the drop-in libraries, floors)")
        run(["cargo", "build", "--release", "-q", "-p", "roce-cli"], timeout=3600)
        run(["cargo", "build", "--release", "-q", "-p", "roce-testkit", "--example", "floors"], timeout=3600)


def record(results, name, value):
    """Splits the composite measures into their named figures."""
    if isinstance(value, dict):
        names = {"memcpy": "memcpy 64 KiB GB/s", "pipe": "pipe rtt us", "gso": "udp gso Gbit/s",
                 "half": "udp half rtt us"}
        for k, v in value.items():
            results.setdefault(names[k], []).append(v)
    else:
        results.setdefault(name, []).append(value)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rounds = int(args[0]) if args else 9
    ensure_built()
    if roce_port_holders():
        say(f"note: {roce_port_holders()} UDP socket(s) already hold port 4791 on this host")
    results = {}
    for r in range(rounds):
        order = MEASURES if r % 2 == 0 else list(reversed(MEASURES))
        for name, unit, fn in order:
            try:
                value = fn()
            except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
                say(f"round {r + 1}: {name}: failed: {e}")
                continue
            record(results, name, value)
            shown = ", ".join(f"{k} {v:.3f}" for k, v in value.items()) if isinstance(value, dict) else f"{value:.3f} {unit}"
            say(f"round {r + 1}/{rounds}: {name}: {shown}")
    med = {k: statistics.median(v) for k, v in results.items() if v}
    say(f"\nmedians of {rounds} rounds:")
    say("| measure | median | range |")
    say("|---|---|---|")
    for k, v in results.items():
        say(f"| {k} | {med[k]:.3f} | {min(v):.3f}–{max(v):.3f} |")
    say("\n| target | ratio | bound | met |")
    say("|---|---|---|---|")
    verdicts = []
    for label, num, den, bound, at_least in TARGETS:
        if num not in med or (den is not None and den not in med):
            verdicts.append({"target": label, "ratio": None, "bound": bound, "met": None})
            say(f"| {label} | - | {'≥' if at_least else '≤'} {bound} | no figure |")
            continue
        ratio = med[num] / med[den] if den else med[num]
        met = ratio >= bound if at_least else ratio <= bound
        verdicts.append({"target": label, "ratio": ratio, "bound": bound, "met": met})
        say(f"| {label} | {ratio:.3f} | {'≥' if at_least else '≤'} {bound} | {'yes' if met else 'no'} |")
    if JSON:
        print(json.dumps({"rounds": rounds, "medians": med, "runs": results, "targets": verdicts}, indent=1))


if __name__ == "__main__":
    main()
