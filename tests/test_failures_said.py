"""Failures said as what they are: the client's own limits told apart from the server's
failures, a client that never opens more connections than it has files for, a large run's lines in a file, counts
that add up to the requests planned for every scenario kind, an endless stream blamed on the server, and a closed
pipe ended quietly. The faults come from tests/fakes.py (a real vLLM will not run a client out of files)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace

import aiohttp
import pytest

from engine.measure.judge import failures
from engine.measure.load.loadgen import run_load
from engine.measure.progress import Progress
from engine.measure.load.request import describe
from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import scenarios
from engine.measure.workloads.tokens import estimated
from tests.said import parts, values

from .conftest import ROOT, cli_in_process
from .fakes import FakeOpenAIServer

CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _child(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=CHILD_ENV, capture_output=True,
                          text=True, timeout=timeout)


# --- 1. the client's own limits ---------------------------------------------------------------------------------

def test_a_client_out_of_open_files_is_said_as_the_client_s_not_as_a_server_not_listening():
    spec = LoadSpec(base_url="http://127.0.0.1:8000", model="m", prompts=["hi"])
    key = aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 8000, False, True, None, None, None)
    e = aiohttp.ClientConnectorError(key, OSError(errno.EMFILE, "Too many open files"))
    error = describe(e, spec)
    assert error.startswith("this client ran out of open files ([Errno 24] Too many open files; its open-file limit")
    said = failures.failure_cause(error)
    assert "this client (the load generator, not the server)" in parts(said)["what"]
    assert values(said)["what"]["what"] == "open files" and "ulimit -n" in parts(said)["todo"]
    assert "nothing listening" not in said and "start the server" not in said
    ports = describe(aiohttp.ClientConnectorError(key, OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")),
                     spec)
    assert "ran out of local ports" in failures.failure_cause(ports)
    assert "ran out of memory" in failures.failure_cause(describe(MemoryError(), spec))


def test_the_client_raises_its_open_file_limit_to_the_hard_limit():
    done = _child("""
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 512))
        from engine.measure.load.request import raise_fd_limit
        print(raise_fd_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["512", "512"]


def test_a_burst_beyond_the_open_file_limit_waits_for_connections_instead_of_failing():
    """300 requests at once from a process that may hold 160 files (the soft and the hard limit): today each
    request beyond them failed with 'Too many open files', said as 'found nothing listening'."""
    with FakeOpenAIServer(chunk_delay_s=0.01) as srv:
        done = _child(f"""
            import resource
            resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))
            from engine.measure.judge import failures, lateness
            from engine.measure.load.loadgen import run_load
            from engine.measure.load.spec import LoadSpec
            run = run_load(LoadSpec(base_url="{srv.base_url}", model="ok", prompts=["hi"], num_requests=300,
                                    shape="burst", max_tokens=4, workers=1))
            print("OK", run.summary.completed, run.summary.failed)
            print("BUDGET", run.extra.load_client.connections, run.extra.load_client.waits)
            print("SAID", lateness.budget_said(run.extra))
            for _, s in failures.run_causes(run):
                print("CAUSE", s)
        """)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["OK"] == "300 0", done.stdout
    budget, waits = map(int, lines["BUDGET"].split())
    assert 1 <= budget < 160 and waits > 0
    assert "open-file limit" in lines["SAID"] and "ulimit -n" in lines["SAID"]
    assert "CAUSE" not in lines


def test_a_large_cli_run_prints_a_summary_and_keeps_each_request_s_line_in_a_file(tmp_path, monkeypatch):
    for name, value in (("HOME", tmp_path), ("RUNTIME", tmp_path / "runtime"), ("DB", tmp_path / "h.sqlite")):
        monkeypatch.setenv(f"SERVING_LAB_{name}", str(value))
    with FakeOpenAIServer(chunk_delay_s=0.001, models=("ok",)) as srv:
        done = cli_in_process("run", "concurrent-10", "--url", srv.base_url, "--input-len", "8", "--num-prompts", "400",
                              "--max-tokens", "2")
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert len(out) < 120, done.stdout
    logs = list((tmp_path / "logs").glob("requests-*.log"))
    assert len(logs) == 1 and f"each request's line: {logs[0]}" in done.stdout
    assert len(logs[0].read_text().splitlines()) == 400
    assert "requests ok / failed   400 / 0" in done.stdout


# --- 4. counts that add up -----------------------------------------------------------------------------------------

def _load_scenarios() -> list[str]:
    return [s.name for s in scenarios.SCENARIOS.values() if s.kind == "vllm"]


def _spec(name: str, url: str) -> LoadSpec:
    """The scenario's spec aimed at the fake, quick: short answers, a compressed clock, a chat of four turns (the
    fake refuses the third with vLLM's 400, so the fourth is never sent)."""
    scn = scenarios.get(name)
    if scn.workload.get("kind") == "multi-turn":
        scn = replace(scn, workload={**scn.workload, "turns": 4})
    spec = scn.load_spec(url, "short", tokens=estimated(), max_tokens=3)
    over = {"warmup": 0, "max_tokens_each": [min(k, 3) for k in spec.max_tokens_each] if spec.max_tokens_each else None}
    if spec.offsets is not None:
        over["offsets"] = [t * 0.01 for t in spec.offsets]
    if spec.rate:
        over["rate"] = 200.0
    if spec.ramp_up_s:
        over["ramp_up_s"] = 0.2
    return replace(spec, **over)


class _StopAfter(Progress):
    """Stops the run the moment its k-th measured request goes out (in the sender's own loop, so nothing else is
    sent after it but what was already on its way): a stop by answers received depended on the machine's pace (on a
    loaded one every request of a 200/s schedule was out before the second answer came back)."""

    def __init__(self, k: int, cancel: threading.Event):
        self.k, self.cancel, self.sent = k, cancel, 0

    def on_request_sent(self, record) -> None:
        if not record.warmup:
            self.sent += 1
            if self.sent >= self.k:
                self.cancel.set()


@pytest.mark.parametrize("stopped", [False, True], ids=["whole", "stopped"])
@pytest.mark.parametrize("name", _load_scenarios())
def test_every_summary_s_counts_add_up_to_the_requests_planned(name, stopped):
    with FakeOpenAIServer(chunk_delay_s=0.002) as srv:
        spec = _spec(name, srv.base_url)
        cancel = threading.Event()
        run = run_load(spec, observer=_StopAfter(2, cancel) if stopped else None, cancel=cancel)
    c = failures.counts(run)
    assert c.planned == spec.n == run.extra.load_client.planned_requests
    assert c.answered + c.failed + c.never_sent + c.in_flight == c.planned, c
    causes = failures.run_causes(run)
    assert sum(n for n, _ in causes) == c.planned - c.answered - c.in_flight, causes
    if stopped and spec.in_flight() < spec.units:  # not all out at once: some were never sent
        assert c.never_sent > 0
        assert any("never sent because the run was stopped" in s for _, s in causes), causes
    if spec.conversations and not stopped:  # 4 turns: the third refused, the fourth never sent
        k = len(spec.conversations)
        refused = next(s for n, s in causes if "prompt alone is longer" in s)
        never = next(s for n, s in causes if "never sent because an earlier turn" in s)
        assert refused.startswith(f"{k} of {4 * k} requests were refused") and never.startswith(f"{k} of {4 * k}")
        assert (c.answered, c.failed, c.never_sent) == (2 * k, k, k)


def test_the_cli_summary_says_the_never_sent_apart_from_the_failed():
    from engine.cli.summary import summary_table

    with FakeOpenAIServer(chunk_delay_s=0.002) as srv:
        spec = _spec("multi-turn", srv.base_url)
        run = run_load(spec)
    k = len(spec.conversations)
    lines = summary_table(run).splitlines()
    assert lines[1] == f"requests ok / failed   {2 * k} / {k}, {k} never sent ({4 * k} planned)"


# --- 6. advice that fits; a closed pipe -----------------------------------------------------------------------------

def test_an_endless_stream_is_said_as_the_server_s_doing():
    with FakeOpenAIServer(endless=True) as srv:
        run = run_load(LoadSpec(base_url=srv.base_url, model="endless", prompts=["hi"], num_requests=2, concurrency=2,
                                max_tokens=2, timeout_s=2.0))
    (n, said), = failures.failure_causes(run.records)
    assert n == 2 and values(said)["what"] == {"n": 2, "asked": "2", "s": "2"}
    assert "kept streaming" in parts(said)["what"]
    assert "the server's doing" in parts(said)["todo"] and "lower the max tokens" not in said


def test_a_slow_answer_cut_at_its_deadline_keeps_the_load_advice():
    with FakeOpenAIServer() as srv:
        run = run_load(LoadSpec(base_url=srv.base_url, model="trickle", prompts=["hi"], num_requests=1,
                                max_tokens=50, timeout_s=1.0))
    (n, said), = failures.failure_causes(run.records)
    assert "did not finish within 1 s" in said and "lower the max tokens" in said


def test_a_closed_pipe_ends_the_command_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line (`| head` that already exited)
    try:
        done = subprocess.run([sys.executable, "-m", "engine", "list"], cwd=ROOT, stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert done.stderr == "" and done.returncode == 141
