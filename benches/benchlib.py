"""Helpers the bench scripts of this directory share: ending a process
group, and the last lines of a program's output for an error message.
The scripts run as `python3 benches/NAME.py`, so this directory is on
their import path."""
import os
import signal
import subprocess


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
