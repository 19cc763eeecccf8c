#!/usr/bin/env python3
"""The RDMA middleware over the drop-in libraries against plain verbs, in
one sitting, alternating, two processes (or ranks) on one host (issue 34
item 5): perftest's `ib_write_lat -s 2` and `ib_write_bw -s 65536` (the
verbs figures), UCX's `ucx_perftest` (`tag_lat` 8 B with
`UCX_TLS=rc_verbs,ud_verbs` and with `ud_verbs`, `ucp_put_bw` 64 KiB with
`rc_verbs,ud_verbs`: `rc_verbs` alone has no transport to wire up with,
"no auxiliary transport"), the MPI ping-pong
of crates/roce-cli/tests/mpi/mpi_check.c (8 B latency, 64 KiB bandwidth)
with Open MPI (`--mca pml ucx`) and MPICH (ch4:ucx), and libfabric's
verbs provider (`verbs;ofi_rxm` RDM and verbs MSG endpoints) with
crates/roce-ibverbs/tests/c/fabric_pingpong.c. Every program runs
unmodified through `roce exec --devices DEV`.

    python3 benches/middleware.py [ROUNDS] [--dev DEV --addr ADDR] [--roce PATH] [--json]

Defaults: 3 rounds, DEV lo and ADDR 127.0.0.1, target/release/roce
with the libraries of target/release/deps (`cargo build --release -p
roce-ibverbs -p roce-cli`). libfabric's verbs provider skips loopback
interfaces, so on `lo` its rows are skipped; for all layers on one
device, run in a network namespace of one's own with a veth (root; both
ends in it, one with the address: its traffic stays on the host as on
`lo`):

    unshare -n sh -c 'ip link set lo up && ip link add v0 type veth peer name v1 &&
        ip addr add 10.77.0.1/24 dev v0 && ip link set v1 up && ip link set v0 up &&
        python3 benches/middleware.py 3 --dev v0 --addr 10.77.0.1'

Within a round the tests run in a rotated order (each round starts one
test later), so drift of a shared machine falls on all alike. Prints one
line per measurement, then a table per layer: the median of each figure
and its ratio to the verbs figure of the same kind (latency to
`ib_write_lat`'s, bandwidth to `ib_write_bw`'s) as the median of the
per-round ratios. Latencies are one-way (half the round trip) in µs;
bandwidths in MB/s as each tool prints them (perftest and ucx_perftest:
2^20 bytes/s; mpi_check: 10^6 bytes/s, converted here to 2^20). A run
that fails prints why and counts as missing. With --json the lines go
to stderr and a JSON document to stdout.
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import figure, kill_group, tail

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 120  # s for any one client or job
LISTEN_TIMEOUT = 20  # s for a server to listen

JSON = "--json" in sys.argv
OUT = sys.stderr if JSON else sys.stdout


def say(*a):
    print(*a, file=OUT, flush=True)


def opt(name, default):
    if name in sys.argv:
        i = sys.argv.index(name)
        if i + 1 >= len(sys.argv):
            sys.exit(__doc__)
        return sys.argv[i + 1]
    return default


DEV = opt("--dev", "lo")
ADDR = opt("--addr", "127.0.0.1")
ROCE = os.path.abspath(opt("--roce", os.path.join(ROOT, "target", "release", "roce")))
LIB_DIR = os.path.join(os.path.dirname(ROCE), "deps")


def env(**extra):
    """The environment of every run: no ROCE_/UCX_/OMPI_/MPIR_ settings
    of the caller, the library next to `roce`, and `extra`."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ROCE_", "UCX_", "OMPI_", "MPIR_"))}
    if os.path.exists(os.path.join(LIB_DIR, "libibverbs.so")):
        e["ROCE_LIB_DIR"] = LIB_DIR
    e.update(extra)
    return e


def roce_exec(argv):
    return [ROCE, "exec", "--devices", DEV, "--"] + argv


def tcp_listening(port):
    want = f":{port:04X}"
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    c = line.split()
                    if c[1].endswith(want) and c[3] == "0A":
                        return True
        except OSError:
            pass
    return False


_port = [30000 + os.getpid() % 2000 * 5]


def next_port():
    _port[0] += 1
    while tcp_listening(_port[0]):
        _port[0] += 1
    return _port[0]


def spawn(argv, e, out=subprocess.PIPE):
    return subprocess.Popen(argv, env=e, stdout=out, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def job(argv, e):
    """One process (an MPI launcher): its output, or raises with why."""
    p = spawn(argv, e)
    try:
        out, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_group(p)
        raise RuntimeError(f"timed out after {TIMEOUT} s")
    finally:
        kill_group(p)
    if p.returncode != 0:
        raise RuntimeError(f"exited {p.returncode}:\n{tail(out)}")
    return out


def pair(server, client, e, ready, server_log=None):
    """Server, then client once `ready()`; the client's output (and the
    server's), or raises with why. The server is ended after 20 s. With
    `server_log`, the server writes there (for `ready` to read)."""
    s = c = None
    log = open(server_log, "w") if server_log else None
    try:
        s = spawn(server, e, log or subprocess.PIPE)
        end = time.monotonic() + LISTEN_TIMEOUT
        while not ready():
            if s.poll() is not None:
                raise RuntimeError(f"server exited ({s.returncode}) before it was ready:\n{tail(s.communicate()[0])}")
            if time.monotonic() > end:
                raise RuntimeError("server never ready")
            time.sleep(0.02)
        c = spawn(client, e)
        try:
            cout, _ = c.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"client timed out after {TIMEOUT} s")
        try:
            sout, _ = s.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            kill_group(s)
            sout = (s.communicate()[0] or "") + "\n(server killed 20 s after its client ended)"
        if log:
            with open(server_log) as f:
                sout = f.read()
        if c.returncode != 0:
            raise RuntimeError(f"client exited {c.returncode}:\n{tail(cout)}\n  server:\n{tail(sout)}")
        return cout, sout
    finally:
        kill_group(c)
        kill_group(s)
        if log:
            log.close()


# --- the programs -----------------------------------------------------------

def perftest(tool, args, col):
    def run(_):
        port = next_port()
        a = args + ["-p", str(port)]
        out, _ = pair(roce_exec([tool] + a), roce_exec([tool] + a + [ADDR]), env(), lambda: tcp_listening(port))
        return figure(out, col)
    return run


def ucx(test, size, iters, tls, col):
    """ucx_perftest's `Final:` line: iterations, latency 50 %ile, average,
    overall (µs), bandwidth average, overall (MB/s), rate average, overall."""
    def run(_):
        port = next_port()
        a = ["-p", str(port), "-t", test, "-s", str(size), "-n", str(iters)]
        out, _ = pair(roce_exec(["ucx_perftest"] + a), roce_exec(["ucx_perftest", ADDR] + a), env(UCX_TLS=tls),
                      lambda: tcp_listening(port))
        for l in out.splitlines():
            if l.strip().startswith("Final:"):
                return float(l.split()[1 + col])
        raise RuntimeError("no Final: line:\n" + tail(out))
    return run


MPI_ARGS = ["65536", "2000", "1024", "1024"]  # max size, round trips, Allreduce, Alltoall bytes


def mpi_figure(out, table, size):
    """The figure of `size` in mpi_check's table whose title has `table`."""
    inside = False
    for l in out.splitlines():
        l = re.sub(r"^\[[^\]]*\]<stdout>:|^\[\d+\]\s*", "", l).strip()
        if l.startswith("#"):
            inside = table in l if "OSU-style" in l else inside
            continue
        f = l.split()
        if inside and len(f) == 2 and f[0] == str(size):
            return float(f[1])
    raise RuntimeError(f"no {table} row for {size}:\n" + tail(out, 12))


def mpi(which, prog):
    """Both figures of one mpi_check job, as {"lat": µs, "bw": MB/s}."""
    def run(_):
        if which == "ompi":
            argv = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2",
                    "--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "osc", "ucx", "-x", "UCX_TLS"]
        else:
            argv = ["mpiexec.mpich", "-n", "2"]
        e = env(UCX_TLS="rc_verbs,ud_verbs", MPIR_CVAR_NOLOCAL="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        out = job(roce_exec(argv + [prog[0]] + MPI_ARGS), e)
        if "mismatches" in out and "(0 mismatches)" not in out:
            raise RuntimeError("mpi_check found mismatches:\n" + tail(out))
        lat = mpi_figure(out, "Latency", 8)
        bw = mpi_figure(out, "Bandwidth", 65536) * 1e6 / 2**20
        return {"lat": lat, "bw": bw}
    run.job = which
    return run


def fabric(ep, size, count, prog):
    def run(_):
        port = next_port()
        args = [ep, ADDR, str(port), str(count), str(size)]
        # The server prints "ok listening" (unbuffered) once it listens.
        log = os.path.join(os.path.dirname(prog[0]), "fabric-server.out")

        def listening():
            with open(log) as f:
                return "ok listening" in f.read()
        out, _ = pair(roce_exec([prog[0], "server"] + args), roce_exec([prog[0], "client"] + args), env(),
                      listening, log)
        m = re.search(r"([0-9.]+) us per round trip", out)
        if not m:
            raise RuntimeError("no round trip figure:\n" + tail(out))
        return float(m.group(1)) / 2
    return run


def build(tmp):
    """mpi_check for each MPI and fabric_pingpong, built here; a missing
    compiler leaves its program None (its rows skip)."""
    progs = {}
    for key, cc, src, extra in [
        ("ompi", "mpicc.openmpi", "crates/roce-cli/tests/mpi/mpi_check.c", []),
        ("mpich", "mpicc.mpich", "crates/roce-cli/tests/mpi/mpi_check.c", []),
        ("fabric", "cc", "crates/roce-ibverbs/tests/c/fabric_pingpong.c", ["-lfabric"]),
    ]:
        out = os.path.join(tmp, key)
        r = subprocess.run([cc, "-O2", "-o", out, os.path.join(ROOT, src)] + extra, capture_output=True, text=True)
        progs[key] = out if r.returncode == 0 else None
        if r.returncode != 0:
            say(f"{key}: {cc} failed, its rows skip:\n{tail(r.stderr)}")
    return progs


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--") and a not in (DEV, ADDR, opt("--roce", None))]
    rounds = int(args[0]) if args else 3
    if not os.path.exists(ROCE):
        sys.exit(f"no {ROCE}: cargo build --release -p roce-ibverbs -p roce-cli")
    tmp = tempfile.mkdtemp(prefix="roce-mw")
    progs = build(tmp)
    # Boxes so that a program built is found at run time.
    p = {k: [v] for k, v in progs.items()}
    # layer, name, kind (lat: µs, lower is better; bw: MB/s), runner, skip reason
    tests = [
        ("verbs", "ib_write_lat -s 2", "lat", perftest("ib_write_lat", ["-s", "2", "-n", "20000"], 4), None),
        ("verbs", "ib_write_bw -s 65536", "bw", perftest("ib_write_bw", ["-s", "65536", "-D", "2"], 3), None),
        ("UCX", "tag_lat 8 B, rc_verbs,ud_verbs", "lat", ucx("tag_lat", 8, 20000, "rc_verbs,ud_verbs", 1), None),
        ("UCX", "tag_lat 8 B, ud_verbs", "lat", ucx("tag_lat", 8, 20000, "ud_verbs", 1), None),
        ("UCX", "ucp_put_bw 64 KiB, rc_verbs,ud_verbs", "bw", ucx("ucp_put_bw", 65536, 5000, "rc_verbs,ud_verbs", 5), None),
        ("MPI", "Open MPI pml ucx, latency 8 B", "lat", mpi("ompi", p["ompi"]), None if progs["ompi"] else "no mpicc.openmpi"),
        ("MPI", "Open MPI pml ucx, bw 64 KiB", "bw", mpi("ompi", p["ompi"]), None if progs["ompi"] else "no mpicc.openmpi"),
        ("MPI", "MPICH ch4:ucx, latency 8 B", "lat", mpi("mpich", p["mpich"]), None if progs["mpich"] else "no mpicc.mpich"),
        ("MPI", "MPICH ch4:ucx, bw 64 KiB", "bw", mpi("mpich", p["mpich"]), None if progs["mpich"] else "no mpicc.mpich"),
    ]
    fab_skip = None if progs["fabric"] else "no libfabric-dev"
    if DEV == "lo":
        fab_skip = "libfabric's verbs provider skips loopback interfaces (run with --dev, see --help)"
    tests += [
        ("libfabric", "verbs;ofi_rxm RDM ping-pong 8 B", "lat", fabric("rdm", 8, 10000, p["fabric"]), fab_skip),
        ("libfabric", "verbs MSG ping-pong 8 B", "lat", fabric("msg", 8, 10000, p["fabric"]), fab_skip),
    ]
    say(f"{rounds} rounds on {DEV} ({ADDR}), {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} at start; {ROCE}")
    results = {t[1]: [None] * rounds for t in tests}
    failures = []
    start = time.monotonic()
    for r in range(rounds):
        order = tests[r % len(tests):] + tests[:r % len(tests)]
        mpi_out = {}
        for layer, name, kind, run, skip in order:
            if skip:
                continue
            try:
                job_of = getattr(run, "job", None)
                if job_of:
                    # One mpi_check job gives both of its figures.
                    if job_of not in mpi_out:
                        mpi_out[job_of] = run(kind)
                    v = mpi_out[job_of][kind]
                else:
                    v = run(kind)
                results[name][r] = v
                say(f"round {r + 1}: {layer:9} {name:36} {v:10.2f} {'us' if kind == 'lat' else 'MB/s'}"
                    f"  (load {os.getloadavg()[0]:.2f})")
            except Exception as ex:  # noqa: BLE001 - a failed run is reported and counted missing
                failures.append({"round": r + 1, "test": name, "why": str(ex)})
                say(f"round {r + 1}: {layer:9} {name:36} FAILED: {ex}")
    elapsed = time.monotonic() - start

    base = {"lat": results["ib_write_lat -s 2"], "bw": results["ib_write_bw -s 65536"]}
    rows = []
    for layer, name, kind, _, skip in tests:
        v = results[name]
        got = [x for x in v if x is not None]
        ratios = [x / b for x, b in zip(v, base[kind]) if x is not None and b]
        rows.append({
            "layer": layer, "test": name, "unit": "us" if kind == "lat" else "MB/s", "values": v,
            "median": statistics.median(got) if got else None,
            "range": [min(got), max(got)] if got else None,
            "ratio_to_verbs": statistics.median(ratios) if ratios else None, "n": len(got), "skipped": skip,
        })
    say(f"\n{rounds} rounds in {elapsed / 60:.1f} min on {DEV}, load {os.getloadavg()[0]:.2f} at end; "
        "ratio: the median of the per-round ratios to the verbs figure of the same kind")
    for layer in dict.fromkeys(r["layer"] for r in rows):
        say(f"\n{layer}")
        head = f"  {'test':<36} {'n':>2} {'median':>10} {'unit':<5} {'min-max':>19} {'x verbs':>8}"
        say(head)
        for row in (r for r in rows if r["layer"] == layer):
            if row["skipped"]:
                say(f"  {row['test']:<36} skipped: {row['skipped']}")
                continue
            med = "-" if row["median"] is None else f"{row['median']:.2f}"
            rng = "-" if row["range"] is None else f"{row['range'][0]:.2f}-{row['range'][1]:.2f}"
            rat = "-" if row["ratio_to_verbs"] is None else f"{row['ratio_to_verbs']:.2f}"
            say(f"  {row['test']:<36} {row['n']:>2} {med:>10} {row['unit']:<5} {rng:>19} {rat:>8}")
    if failures:
        say(f"\n{len(failures)} failed run(s), counted as missing")
    if JSON:
        json.dump({"dev": DEV, "addr": ADDR, "roce": ROCE, "rounds": rounds, "elapsed_s": round(elapsed, 1),
                   "cpus": os.cpu_count(), "rows": rows, "failures": failures}, sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
