"""Shared fixtures. One real vLLM (CPU build) server on the embedded model per test session.

The session server is started the way a user's app would start it — by `python -m engine serve` —
and then that process is killed with SIGKILL, like an app that crashed. The fixture's VLLMServer
must find the orphaned server from its record on disk and adopt it: every server test therefore
also proves the kill-the-app-and-restart path. At the end, stop() must leave no process behind.

Set SERVING_LAB_TEST_URL (and SERVING_LAB_TEST_MODEL) to reuse a server you already run while
iterating; CI always starts its own."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

# Tests never touch the user's history or server records; the converted models stay shared.
from engine.paths import models_dir  # noqa: E402

os.environ.setdefault("SERVING_LAB_MODELS", str(models_dir()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def isolated_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("lab-home")
    os.environ["SERVING_LAB_HOME"] = str(home)
    os.environ["SERVING_LAB_RUNTIME"] = str(home / "runtime")
    return home


@pytest.fixture(scope="session")
def embedded_model():
    from engine.serving import models

    return models.embedded()


def _serve_then_kill(port: int, timeout_s: float = 900) -> list[str]:
    """Start a server through the CLI, wait for 'ready', then SIGKILL the CLI (the 'app')."""
    argv = [sys.executable, "-m", "engine", "serve", "--model", "embedded", "--port", str(port),
            "--kv-cache-gib", "1", "--max-model-len", "2048"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.time() + timeout_s
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if line.startswith("ready in"):
            break
        if time.time() > deadline:
            break
    if not any(l.startswith("ready in") for l in lines):
        proc.kill()
        pytest.fail("`python -m engine serve` did not get the server ready:\n" + "\n".join(lines[-40:]))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return lines


@pytest.fixture(scope="session")
def vllm_server(isolated_home):
    """A ready server: SimpleNamespace(base_url, model, port, server (VLLMServer or None), cli_output)."""
    url = os.environ.get("SERVING_LAB_TEST_URL")
    if url:
        yield SimpleNamespace(base_url=url, model=os.environ.get("SERVING_LAB_TEST_MODEL", "smol"), server=None,
                              port=int(url.rsplit(":", 1)[1].split("/")[0]), cli_output=[])
        return
    from engine.serving.server import VLLMServer

    port = free_port()
    cli_output = _serve_then_kill(port)
    srv = VLLMServer(port=port)  # the "restarted app": must adopt the orphan
    try:
        snap = srv.wait_ready(timeout_s=60)
    except Exception as e:  # say why: the adoption's notice, the server's log, what the CLI printed
        s = srv.snapshot()
        pytest.fail(f"the orphaned server was not adopted ({e}); notice: {s.notice}\nserver log:\n"
                    + "\n".join(s.log_tail[-30:]) + "\nCLI:\n" + "\n".join(cli_output[-15:]))
    try:
        yield SimpleNamespace(base_url=snap.config.base_url, model=snap.config.model_name, port=port, server=srv,
                              cli_output=cli_output)
    finally:
        pid = srv.snapshot().pid
        family = _family(pid)
        srv.stop()
        left = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"stop() left processes behind: {left}"


def _family(pid: int | None) -> list[psutil.Process]:
    if not pid:
        return []
    try:
        p = psutil.Process(pid)
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return []
