"""The CPU seconds (user + system) a command and every process it leaves behind spend, for the suite's cost per test
file (bench/results/test-suite-cpu.md). `/usr/bin/time` counts only descendants that are waited for: a server
started `--detach`, or the session server whose CLI the fixture kills, is re-parented to init and its seconds are
lost. Here this process is the command's subreaper, so such orphans come back to it and are counted when they end.

Usage: bench/tree_cpu.py [--linger S] -- COMMAND...   (prints one line: wall, CPU, exit code; exits with the code)
Processes still alive S seconds (default 120) after the command ended are named and not counted."""
from __future__ import annotations

import argparse
import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--linger", type=float, default=120.0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")
    t0 = time.monotonic()
    main_pid = subprocess.Popen(cmd).pid
    code, wall, deadline = None, 0.0, float("inf")
    # Reap every child as it ends, orphans included: one held as a zombie would still "exist" for the suite's own
    # waits (psutil.wait_procs), and a server's stop would sit out its whole grace period.
    while time.monotonic() < deadline:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG if code is not None else 0)
        except ChildProcessError:
            break
        if pid == main_pid:
            code, wall = os.waitstatus_to_exitcode(status), time.monotonic() - t0
            deadline = time.monotonic() + a.linger
        elif pid == 0:
            time.sleep(0.5)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == os.getpid()]
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"tree_cpu: wall {wall:.0f} s, CPU {ru.ru_utime + ru.ru_stime:.1f} s (user {ru.ru_utime:.1f} + sys "
          f"{ru.ru_stime:.1f}), exit {code}" + (f", still running (not counted): {left}" if left else ""),
          file=sys.stderr)
    return 1 if code is None else code


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


if __name__ == "__main__":
    sys.exit(main())
