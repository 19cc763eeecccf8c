#!/usr/bin/env python3
"""Two `roce` binaries side by side on loopback, alternating, N runs each:
benches/perf_side_by_side.py OLD NEW [RUNS]. Prints one line per run and a
Markdown table (docs/performance.md, "The engine's ACK deferral ...").
Build OLD from an earlier commit in a worktree:
  git worktree add /tmp/old REV && cargo build --release -p roce-cli --bin roce --manifest-path /tmp/old/Cargo.toml
"""
import json, subprocess, sys
old, new = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
cases = [
    ("write-bw -s 65536", ["write-bw", "-s", "65536", "-n", "20000"], "bw_avg_gbit_per_sec"),
    ("write-lat -s 2", ["write-lat", "-s", "2", "-n", "20000"], "t_typical_usec"),
    ("send-lat -s 2", ["send-lat", "-s", "2", "-n", "20000"], "t_typical_usec"),
    ("read-lat -s 2", ["read-lat", "-s", "2", "-n", "20000"], "t_typical_usec"),
    ("send-bw -s 8 -q 4", ["send-bw", "-s", "8", "-q", "4", "-n", "50000"], "msg_rate_mpps"),
]
port = 25000
res = {}
for name, args, key in cases:
    for r in range(runs):
        for label, exe in (("old", old), ("new", new)):
            port += 2
            cmd = [exe, "perf", *args, "--loopback", "--json", "-p", str(port), "--roce-port", str(port + 1)]
            try:
                o = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                v = json.loads(o.stdout.strip().splitlines()[-1])
                x = v["results"][-1][key]
            except Exception as e:
                x = float("nan")
                print(f"{label} {name}: failed: {e} {o.stderr[-200:] if 'o' in dir() else ''}", file=sys.stderr)
            res.setdefault((name, label), []).append(x)
            print(f"{name:20} {label} run {r+1}: {x:.3f} {key}", flush=True)
print()
print(f"| test | metric | old ({runs} runs) | new ({runs} runs) |")
print("|---|---|---|---|")
for name, _, key in cases:
    o = res[(name, "old")]; n = res[(name, "new")]
    f = lambda l: " / ".join(f"{x:.2f}" if key != "msg_rate_mpps" else f"{x:.3f}" for x in l)
    print(f"| {name} | {key} | {f(o)} | {f(n)} |")
