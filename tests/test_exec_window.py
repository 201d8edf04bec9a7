"""A process just launched, as the next reader of its record sees it. Popen returns once exec has begun; on a busy
machine /proc/PID/cmdline and environ read empty for a while after (180 of 300 launches beside six busy loops on
this 2-core VM), and a second app reading the port's record in that moment saw no API server and launched another
(CI, test_e2e_one_server). proctree.exec_done is what VLLMServer.start waits on before it writes the record."""
from __future__ import annotations

import os
import subprocess

from engine.serving import proctree


def _read(pid: int, what: str) -> bytes:
    with open(f"/proc/{pid}/{what}", "rb") as f:
        return f.read()


def test_after_exec_done_a_launch_shows_its_command_line_and_environment_even_on_a_busy_machine():
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        for n in range(60):
            p = subprocess.Popen(["sleep", "5"], env={"MARK": str(n)}, start_new_session=True)
            try:
                proctree.exec_done(p.pid, timeout_s=120)  # a liveness bound, not the product's 10 s: never the pace
                assert _read(p.pid, "cmdline").startswith(b"sleep\0"), n
                assert b"MARK=%d" % n in _read(p.pid, "environ"), n
            finally:
                p.kill()
                p.wait()
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def test_exec_done_returns_for_a_process_that_is_gone():
    p = subprocess.Popen(["true"])
    p.wait()
    proctree.exec_done(p.pid, timeout_s=30)  # reaped: no /proc entry; it must not wait out the 30 s
    q = subprocess.Popen(["sh", "-c", "exit 0"])
    while proctree.alive(__import__("psutil").Process(q.pid)):  # a zombie until reaped: reads empty
        pass
    proctree.exec_done(q.pid, timeout_s=30)
    q.wait()
