"""Child processes that must not outlive the app: the load generator's client processes and the naive worker.
See docs/internals.md#lifeline."""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, poll_s: float = 1.0) -> None:
    """Call first thing in a child, with the pid its parent had when it started it (not os.getppid() now:
    a parent that died while the child was still importing has already been replaced by init)."""
    ppid = parent_pid
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != ppid:  # the parent died before the prctl took hold
        os._exit(1)

    def watch() -> None:
        while True:
            threading.Event().wait(poll_s)
            if os.getppid() != ppid:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
