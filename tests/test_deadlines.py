"""Every wait has an end: a server that answers GET /v1/models and then never ends an
answer (tests/fakes.py, endless=True: the one fault a real vLLM will not produce on demand) against
Connect, a chat, a load test and the CLI: each ends at its deadline, in its sentence. The deadlines are
the product's own (10 s per GET of discovery, 30 s + 0.5 s per token of an answer); these tests ask for
2 tokens, so each answer's deadline is 31 s. The chat's, the load test's and the CLI's waits start when the module
does and run out in the background, beside the connect ones: idle waits side by side take one deadline, not four."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from engine.errors import LabError
from engine.lab import Lab
from engine.measure.load.loadgen import run_load
from engine.measure.load.spec import LoadSpec, request_deadline_s
from engine.observe.telemetry import ANSWER_DEADLINE_S
from engine.results.store import RunStore

from .conftest import ROOT, free_port
from .fakes import FakeOpenAIServer
from .said import parts, read, said, values

pytestmark = pytest.mark.slow  # each waits out a real deadline (10 to 31 s)

TOKENS = 2
DEADLINE = request_deadline_s(TOKENS)


class Waiting:
    """fn() in a thread from now on; outcome() fails the test, instead of hanging, if fn has not returned within
    limit_s of the start."""

    def __init__(self, fn, limit_s: float):
        self.limit_s, self.started, self.box = limit_s, time.monotonic(), {}
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn) -> None:
        try:
            self.box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.box["error"] = e

    def outcome(self) -> dict:
        self.thread.join(max(0.0, self.started + self.limit_s - time.monotonic()))
        assert not self.thread.is_alive(), f"still waiting after {self.limit_s:.0f} s: this wait has no end"
        return self.box


def guarded(fn, limit_s: float) -> dict:
    return Waiting(fn, limit_s).outcome()


def _endless(fn):
    """fn(server) against an endless server of its own, stopped afterwards."""
    def run():
        with FakeOpenAIServer(endless=True) as srv:
            return fn(srv)
    return run


def _load(srv) -> tuple[LoadSpec, object]:
    spec = LoadSpec(base_url=srv.base_url, model="endless", prompts=["hello"], num_requests=2, concurrency=2,
                    max_tokens=TOKENS)
    return spec, run_load(spec)


def _cli(srv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "run", "stream-300", "--url", srv.base_url, "--max-tokens",
                           str(TOKENS)], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True,
                          text=True, timeout=300)


def _chat(lab):
    def run(srv):  # attached (discovery waits out /metrics and /version), then an answer that never ends
        lab.attach(srv.base_url)
        rec = lab.chat_record("hello")
        box = guarded(lambda: "".join(lab.chat([{"role": "user", "content": "hello"}], rec, max_tokens=TOKENS)),
                      DEADLINE + 30)
        return rec, box
    return run


def _lab(folder, lab_settings) -> Lab:
    return Lab(lab_settings, port=free_port(), store=RunStore(folder / "h.sqlite"), telemetry_interval_s=3600)


@pytest.fixture(scope="module", autouse=True)
def in_flight(tmp_path_factory, lab_settings):
    """The chat, the load test and the CLI run, each against its own endless server, started as the module starts."""
    chat_lab = _lab(tmp_path_factory.mktemp("chat"), lab_settings)
    waits = {"chat": Waiting(_endless(_chat(chat_lab)), 4 * ANSWER_DEADLINE_S + DEADLINE + 30),
             "load": Waiting(_endless(_load), DEADLINE + 30), "cli": Waiting(_endless(_cli), 240)}
    yield waits
    for w in waits.values():  # a wait whose test was left out (-k) still ends with the module
        w.thread.join(300)
    chat_lab.shutdown()


@pytest.fixture
def lab(tmp_path, lab_settings):
    lab = _lab(tmp_path, lab_settings)
    yield lab
    lab.shutdown()


def test_connect_runs_as_a_job_that_ends_at_its_deadlines_with_the_sentence(lab):
    with FakeOpenAIServer(endless=True) as srv:
        job = lab.connect(srv.base_url)
        assert job.active  # the page's thread got the job back at once and stays usable
        box = guarded(lambda: _wait_done(job), 4 * ANSWER_DEADLINE_S)
        assert "error" not in box
        assert job.error is None and job.result is not None
        attached = lab.attached()
        # its models answered; its /metrics never ended: left out, in the sentence that says so
        assert attached.model == "endless"
        assert said(attached.metrics_said).template.startswith("{url} kept sending for {s:g} s without finishing")
        assert values(attached.metrics_said)["s"] == ANSWER_DEADLINE_S


def test_connect_given_up_changes_nothing(lab):
    with FakeOpenAIServer(endless=True) as srv:
        job = lab.connect(srv.base_url)
        lab.cancel_job(job.id)
        guarded(lambda: _wait_done(job), 4 * ANSWER_DEADLINE_S)
    assert lab.attached() is None


def _wait_done(job) -> None:
    while job.active:
        time.sleep(0.1)


def test_a_chat_with_an_endless_answer_ends_at_its_deadline_in_its_sentence(in_flight):
    rec, box = in_flight["chat"].outcome()["value"]
    assert isinstance(box.get("error"), LabError)
    cut = said(box["error"])
    assert cut.template.startswith("The answer had not ended after {s:.0f} s, its deadline") and "cut off" in cut
    assert values(cut) == {"s": pytest.approx(DEADLINE), "n": TOKENS}
    assert rec.chunk_times  # what arrived is kept
    assert rec.end_time >= DEADLINE


def test_a_load_test_against_an_endless_stream_ends_each_request_at_its_deadline(in_flight):
    spec, result = in_flight["load"].outcome()["value"]
    assert spec.deadline_s == DEADLINE
    assert len(result.records) == 2
    for r in result.records:  # more chunks than asked for: the stream, not the load, is at fault
        # the record's own error (failures' "endless" rule reads it, below): its numbers
        assert f"past the {TOKENS} tokens" in r.error and f"within {DEADLINE:g} s" in r.error and r.chunk_times
    from engine.measure.judge import failures
    (count, sentence), = failures.failure_causes(result.records)
    assert count == 2 and parts(sentence) == {
        "who": "All {total} requests",
        "what": "kept streaming past the {asked} tokens asked for and had not ended after {s} s",
        "todo": "that is the server's doing, not the load's (it ignores max_tokens or never ends its stream), so "
                "check its log and version"}  # the server's fault, not "lower the max tokens"
    assert values(sentence)["what"] == {"n": 2, "asked": str(TOKENS), "s": f"{DEADLINE:g}"}


def test_the_cli_says_the_deadline_first_and_ends_there(in_flight):
    out = in_flight["cli"].outcome()["value"].stdout
    lines = out.splitlines()
    assert read("Each answer must end within {s:.0f} s (30 s, plus 0.5 s for each of its up to {n} tokens), or it is "
                "cut off there and counted as failed.", lines[0]) == {"s": f"{DEADLINE:.0f}", "n": str(TOKENS)}, out
    assert read("kept streaming past the {asked} tokens asked for and had not ended after {s} s", out) == {
        "asked": str(TOKENS), "s": f"{DEADLINE:g}"}, out
    assert read("that is the server's doing, not the load's (it ignores max_tokens or never ends its stream), so "
                "check its log and version", out) == {}, out
    assert "requests ok / failed   0 / 1" in out, out
