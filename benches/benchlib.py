"""Helpers the bench scripts of this directory share: ending a process
group, the last lines of a program's output for an error message, free
TCP ports, and a server/client pair run to completion with bounded
waits.
The scripts run as `python3 benches/NAME.py`, so this directory is on
their import path."""
import os
import signal
import subprocess
import time


def kill_group(proc):
    """SIGKILL the process group of `proc` (started with
    start_new_session) and reap it, waiting at most 5 s."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def tail(text, n=8):
    """The last `n` lines of `text`, indented for an error message."""
    lines = (text or "").strip().splitlines()
    return "\n".join("    | " + l for l in lines[-n:])


def tcp_ports(listening_only):
    """TCP ports on this host (the LISTEN ones, or all)."""
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if not listening_only or fields[3] == "0A":
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


_next_port = [20000 + os.getpid() % 2000 * 5]


def free_port():
    """A TCP port no socket of this host uses."""
    used = tcp_ports(False)
    while _next_port[0] in used:
        _next_port[0] += 1
    p = _next_port[0]
    _next_port[0] += 1
    return p


def roce_port_holders():
    """UDP sockets bound to the RoCE port (4791) in this network namespace."""
    n = 0
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(name) as f:
                next(f)
                n += sum(1 for line in f if line.split()[1].endswith(":12B7"))
        except OSError:
            pass
    return n


def pair(server, client, port, env, listen_timeout=20, client_timeout=120, server_timeout=20,
         server_env=None):
    """Runs a server command until it listens on TCP `port`, then the
    client command; each in a process group of its own, both ended at the
    end whatever happens. The server runs with `server_env` when given,
    else `env`. Returns (client output, None) or (None, why)."""
    srv = cli = None
    try:
        srv = subprocess.Popen(server, env=env if server_env is None else server_env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = time.monotonic() + listen_timeout
        while port not in tcp_ports(True):
            if srv.poll() is not None:
                out, _ = srv.communicate()
                return None, f"server exited ({srv.returncode}) before listening:\n{tail(out)}"
            if time.monotonic() > deadline:
                return None, f"server not listening on TCP {port} after {listen_timeout} s"
            time.sleep(0.02)
        cli = subprocess.Popen(client, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
        try:
            cout, _ = cli.communicate(timeout=client_timeout)
        except subprocess.TimeoutExpired:
            kill_group(cli)
            kill_group(srv)
            sout, _ = srv.communicate()
            cout, _ = cli.communicate()
            return None, f"client timed out after {client_timeout} s:\n{tail(cout)}\n  server:\n{tail(sout)}"
        try:
            sout, _ = srv.communicate(timeout=server_timeout)
        except subprocess.TimeoutExpired:
            kill_group(srv)
            sout, _ = srv.communicate()
            sout += f"\n(server killed {server_timeout} s after its client ended)"
        if cli.returncode != 0:
            return None, f"client exited {cli.returncode}:\n{tail(cout)}\n  server ({srv.returncode}):\n{tail(sout)}"
        return cout, None
    finally:
        kill_group(cli)
        kill_group(srv)


def figure(text, col):
    """Column `col` of the first result row under perftest's `#bytes` header."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            for row in lines[i + 1:]:
                f = row.split()
                if f and f[0].isdigit():
                    return float(f[col])
    raise RuntimeError("no result row in:\n" + text)
