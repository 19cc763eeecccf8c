#!/usr/bin/env python3
"""Unmodified perftest over the drop-in libibverbs.so.1 against `roce perf`,
side by side in one sitting, alternating, on loopback (two processes each).

    python3 benches/dropin_side_by_side.py [ROUNDS] [--rdma-cm] [--pin | --one-cpu]

Needs Debian's perftest and a release build (`cargo build --release -p
roce-cli`, which builds the library beside `roce`). Prints one line per
measurement and the median ratio per test (drop-in / roce perf): the
issue's targets are >= 0.95 for bandwidth, <= 1.05 for latency. roce
perf's ping-pongs run perftest's loops (each send's completion before
the answer), so the two measure the same thing; on a noisy machine take
nine rounds or more (docs/notes/2026-12-02-perftest-loops.md).

With --rdma-cm, perftest connects through the drop-in librdmacm.so.1
(`-R`) and is compared with `roce perf --perftest -R` (its rdma_cm mode),
for the bandwidth and SEND latency tests.
"""
import os
import statistics
import subprocess
import sys
import time

from benchlib import figure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROCE = os.path.join(ROOT, "target", "release", "roce")
PORT = [26000 + os.getpid() % 1000 * 4]

TESTS = [
    # name, perftest tool, roce perf test, args, column, higher-is-better
    # [, perftest's own extra args]
    # The bandwidth tests run for a duration (-D: perftest and roce perf
    # measure after a warm-up): with a count, perftest's figure runs from
    # the first post, and at several GB/s a few milliseconds of set-up
    # (the same-host link, the first touches of its ring) were a third of
    # a -n 5000 run.
    ("write_bw 64 KiB MB/s", "ib_write_bw", "write-bw", ["-s", "65536", "-D", "2"], 3, True),
    ("send_bw 8 B Mpps", "ib_send_bw", "send-bw", ["-s", "8", "-D", "2"], 4, True),
    # roce perf posts its whole window as one list; perftest posts one
    # work request per call unless given -l (post list).
    ("send_bw 8 B, perftest -l 16, Mpps", "ib_send_bw", "send-bw", ["-s", "8", "-D", "2"], 4, True, ["-l", "16"]),
    ("write_lat 2 B t_typical us", "ib_write_lat", "write-lat", ["-s", "2", "-n", "20000"], 4, False),
    ("send_lat 2 B t_typical us", "ib_send_lat", "send-lat", ["-s", "2", "-n", "20000"], 4, False),
    ("read_lat 2 B t_typical us", "ib_read_lat", "read-lat", ["-s", "2", "-n", "20000"], 4, False),
]

# --pin: the server on CPU 0, the client on CPU 1 (taskset), as perftest's
# users often run it; the progress threads share their program's CPU.
PIN = "--pin" in sys.argv
# --one-cpu: both on CPU 0, as in a one-CPU VM or container (the lab VM).
ONE_CPU = "--one-cpu" in sys.argv


def pair(server, client, env=None):
    PORT[0] += 1
    p = str(PORT[0])
    if PIN or ONE_CPU:
        server = ["taskset", "-c", "0"] + server
        client = ["taskset", "-c", "0" if ONE_CPU else "1"] + client
    s = subprocess.Popen(server + ["-p", p], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.4)
    c = subprocess.run(client + ["-p", p], env=env, capture_output=True, text=True, timeout=120)
    try:
        s.wait(timeout=30)
    except subprocess.TimeoutExpired:
        s.kill()
    if c.returncode != 0:
        raise RuntimeError(" ".join(client) + " failed:\n" + c.stdout + c.stderr)
    return c.stdout


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    cm = "--rdma-cm" in sys.argv
    rounds = int(args[0]) if args else 3
    lib = subprocess.run([ROCE, "exec", "--print-path"], capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, LD_LIBRARY_PATH=lib, ROCE_DEVICES="lo")
    tests = [t for t in TESTS if not cm or t[1] in ("ib_write_bw", "ib_send_lat")]
    for name, tool, test, args, col, higher, *extra in tests:
        pt_args = args + (extra[0] if extra else [])
        ratios = []
        if cm:
            name += " (rdma_cm)"
        for r in range(rounds):
            dev = ["-R"] if cm else ["-d", "roce_lo", "-x", "0"]
            mode = ["--perftest", "-R"] if cm else []
            ours = figure(pair([tool] + dev + pt_args, [tool] + dev + pt_args + ["127.0.0.1"], env), col)
            native = figure(
                pair(
                    [ROCE, "perf", test] + mode + (["--bind", "127.0.0.1"] if cm else []) + args,
                    [ROCE, "perf", test, "127.0.0.1"] + mode + args,
                ),
                col,
            )
            ratios.append(ours / native)
            print(f"{name}: round {r + 1}: drop-in {ours:.3f}  roce perf {native:.3f}  ratio {ours / native:.2f}", flush=True)
        print(f"{name}: median ratio {statistics.median(ratios):.2f} ({'higher' if higher else 'lower'} is better)", flush=True)


if __name__ == "__main__":
    main()
