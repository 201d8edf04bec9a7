"""One server per port across processes, with real processes and real vLLM:
two app processes pressing Start at once, an app and `python -m engine serve` at once (bench/one_server.py's
rounds: exactly one server tree, the second told who holds the port, `status` leaving it running); a
serving tree whose record is gone is reported by `status` and by a restarted app, never stopped; after an
adoption a kill -9's sentence counts the serving time from when the server became ready, and says how
long the rest of its tree took to go."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from engine.serving import proctree
from engine.serving.server import FAILED, READY, VLLMServer

from .conftest import ROOT, free_port
from .said import tree

pytestmark = [pytest.mark.server, pytest.mark.slow]


def bench_rounds(tmp_path, mode: str, rounds: int = 1) -> list[dict]:  # 20 in bench/results/one-server.md
    out = tmp_path / f"{mode}.json"
    proc = subprocess.run([sys.executable, "bench/one_server.py", "--rounds", str(rounds), "--modes", mode,
                           "--port", str(free_port()), "--out", "-", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", ["app+app", "app+cli"])
def test_two_processes_pressing_start_at_once_make_one_server(tmp_path, mode):
    for row in bench_rounds(tmp_path, mode):
        assert row["servers"] == 1, row
        assert row["record_names_it"], row
        assert row["second_said"], row  # followed it with a sentence, or refused saying who holds the port
        if mode == "app+cli" and "Port " in row["said"]:
            assert "is held by a vLLM server that" in row["said"], row
        assert row["status_kept_it"], row
        assert not row["left_after_stop"], row


def _serve(port: int) -> list[str]:
    argv = [sys.executable, "-m", "engine", "serve", "--model", "embedded", "--port", str(port), "--kv-cache-gib",
            "1", "--max-model-len", "1024", "--enforce-eager", "--detach"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout.splitlines()


def _health(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_status_never_stops_a_serving_tree_and_a_death_after_adoption_has_the_servers_own_age(isolated_home,
                                                                                             lab_settings):
    port = free_port()
    runtime = isolated_home / "runtime"
    record = runtime / f"server-{port}.json"
    _serve(port)
    rec = json.loads(record.read_text())
    api = psutil.Process(rec["pid"])
    tree = [api, *api.children(recursive=True)]
    assert rec["starter"]["kind"] == "cli" and rec["ready_at"] is not None
    try:
        # A serving tree with no record (as when two trees raced before): status reports, never stops it.
        text = record.read_text()
        record.unlink()
        status = subprocess.run([sys.executable, "-m", "engine", "status", "--port", str(port)], cwd=ROOT,
                                capture_output=True, text=True, timeout=300)
        assert status.returncode == 0, status.stderr
        assert api.pid in json.loads(status.stdout)["leftovers"] and "not stopped" in status.stderr
        # nor does a restarted app cleaning up on its own: a process of the tree listens on its port
        VLLMServer(lab_settings, port=port)
        assert all(proctree.alive(p) for p in tree) and _health(port)
        record.write_text(text)
        os.chmod(record, 0o600)

        # A restarted app adopts it: its ages come from the server's own start, not from this moment.
        srv = VLLMServer(lab_settings, port=port)
        snap = srv.wait_ready(60)
        assert snap.adopted and "`python -m engine serve`" in snap.started_by
        assert abs(snap.started_at - api.create_time()) < 0.01
        assert snap.ready_at == rec["ready_at"]
        time.sleep(2.0)  # so the time since the adoption and the time since ready differ
        killed_at = time.time()
        os.kill(api.pid, signal.SIGKILL)
        deadline = time.time() + 120
        while srv.snapshot().state != FAILED and time.time() < deadline:
            time.sleep(0.2)
        said = srv.snapshot().error
        assert said, srv.snapshot()
        served = int(re.search(r"after serving for (\d+) s", said).group(1))
        assert abs(served - (killed_at - rec["ready_at"])) <= 1.5, said
        took = float(re.search(r"were stopped in ([\d.]+) s", said).group(1))
        assert took > 0, said
        assert not [p for p in tree if proctree.alive(p)]
    finally:
        for p in tree:
            if proctree.alive(p):
                proctree.stop([p], grace_s=2)
        record.unlink(missing_ok=True)


def test_stop_from_another_process_is_said_as_a_stop_not_a_death(isolated_home, lab_settings):
    port = free_port()
    _serve(port)
    follower = VLLMServer(lab_settings, port=port)  # an app following a server the CLI started
    assert follower.wait_ready(60).state == READY
    stop = subprocess.run([sys.executable, "-m", "engine", "stop", "--port", str(port)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert stop.returncode == 0 and "stopped the vLLM server on port" in stop.stdout, stop.stdout + stop.stderr
    deadline = time.time() + 60
    while follower.snapshot().state == READY and time.time() < deadline:
        time.sleep(0.2)
    s = follower.snapshot()
    stopped = tree(s.notice)
    assert s.state == "stopped" and stopped["id"] == "This server was stopped by {who}.", s
    assert (stopped["who"]["id"], stopped["who"]["command"]) == ("`python -m engine {command}` (pid {pid})", "stop"), s
