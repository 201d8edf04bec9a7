"""Cold and warm runs and the cost per million output tokens: the cold rule on
a sequence of runs with known answers, the warm-up's cost from its records, the arithmetic, older runs read
back as unknown, and a real warm-up against the real server."""
from __future__ import annotations

import pytest

from engine.cli import build_parser, main
from engine.cli.summary import summary_table
from engine.measure.judge import cost, stats, warmth
from engine.measure.load.spec import LoadSpec
from engine.measure.judge.warmth import recall_from
from engine.runs.ledger import WarmthLedger
from engine.results.records import Notes, RequestRecord, RunResult
from engine.results.store import RunStore
from engine.runs import Runner, Target
from tests.said import read, values


def batch(n: int, warmup: int = 0) -> list[RequestRecord]:
    """`n` requests in flight at once (each 1 s, TTFT 0.2 s), after a warm-up of `warmup` at once
    (each 0.5 s, TTFT 0.4 s, on the measured part's clock: before 0)."""
    warm = [RequestRecord(index=i, prompt="w", send_time=-1.0, first_token_time=-0.6, end_time=-0.5,
                          chunk_times=[-0.6], output_tokens=1, warmup=True) for i in range(warmup)]
    return warm + [RequestRecord(index=i, prompt="p", send_time=0.0, first_token_time=0.2, end_time=1.0,
                                 chunk_times=[0.2, 0.6, 1.0], output_tokens=3) for i in range(n)]


def run_of(records: list[RequestRecord], duration: float = 1.0) -> RunResult:
    run = RunResult(kind="vllm", scenario="concurrent", label="x", records=records, duration=duration,
                    started_at=1_764_500_000.0, hardware={"accelerator": "cpu"}, versions={"vllm": "0.32.0"})
    run.summary = stats.summarize(records, duration)
    return run


def keep(runner: Runner, target: Target, records: list[RequestRecord]) -> Notes:
    return runner._keep(run_of(records), target).extra


def test_the_cold_rule_on_a_sequence_of_runs():
    runner = Runner(lambda r: r)
    first, restarted = (Target("http://x", "m", instance=f"host pid 7 started {t} s after boot") for t in (1.0, 99.0))
    at10 = keep(runner, first, batch(10))
    assert (at10.warmth.cold, at10.warmth.why, at10.warmth.batch_size) == (True, warmth.FIRST, 10)
    again = keep(runner, first, batch(10))
    assert (again.warmth.cold, again.warmth.why) == (False, warmth.EARLIER_RUN)
    at16 = keep(runner, first, batch(16))
    assert (at16.warmth.cold, at16.warmth.batch_size) == (True, 16)
    after_restart = keep(runner, restarted, batch(10))
    assert (after_restart.warmth.cold, after_restart.warmth.instance) == (True, restarted.instance)
    warmed = keep(runner, restarted, batch(4, warmup=4))  # a warm-up at the measured size makes it warm
    assert (warmed.warmth.cold, warmed.warmth.why, warmed.warmth.warmup_batch_size) == (False, warmth.WARMED_UP, 4)
    smaller_warmup = keep(runner, restarted, batch(8, warmup=2))  # a smaller warm-up does not
    assert smaller_warmup.warmth.cold is True
    assert "first batch of 10 in flight" in warmth.said(at10) and warmth.said(warmed).startswith("Warm: the warm-up")


def test_a_server_that_does_not_say_which_start_it_is_leaves_runs_unknown():
    notes = keep(Runner(lambda r: r), Target("http://x", "m"), batch(10))
    assert notes.warmth.cold is None and notes.warmth.batch_size == 10 and warmth.said(notes) is None


def test_the_ledger_recalls_what_saved_runs_put_through_an_instance(tmp_path):
    store = RunStore(tmp_path / "h.sqlite")
    target = Target("http://x", "m", instance="http://x started 5.00")
    store.save(Runner(lambda r: r)._keep(run_of(batch(10)), target))
    ledger = WarmthLedger(lambda inst: recall_from((r.extra for r in store.list(kind="vllm")), inst))
    again = Runner(lambda r: r, warmth=ledger)._keep(run_of(batch(10)), target).extra  # e.g. the CLI, later
    assert (again.warmth.cold, again.warmth.why) == (False, warmth.EARLIER_RUN)


def test_older_runs_without_the_fields_read_back_as_unknown(tmp_path):
    store = RunStore(tmp_path / "h.sqlite")
    old = run_of(batch(10))
    store.save(old)  # saved as before: no cold field
    assert "cold" not in old.extra.to_dict()
    assert store.load(old.id).extra.warmth.cold is None and store.list()[0].extra.warmth.cold is None
    cold = Runner(lambda r: r)._keep(run_of(batch(10)), Target("http://x", "m", instance="i"))
    store.save(cold)
    back = store.load(cold.id).extra
    assert (back.warmth.cold, back.warmth.why, back.warmth.batch_size, back.warmth.instance) == (True, "first", 10, "i")
    odd = Notes.from_dict({"warmth": {"cold": "yes"}}).warmth
    assert odd.cold is None and odd.other == {"cold": "yes"}  # a value of the wrong type is kept aside, not believed


def test_the_warmup_cost_from_its_records():
    cost = warmth.warmup_cost(batch(3, warmup=2))
    assert (cost.requests, cost.seconds, cost.ttft_s, cost.measured_ttft_s) == pytest.approx((2, 0.5, 0.4, 0.2))
    assert values(cost.said) == pytest.approx({"n": 2, "seconds": 0.5, "ttft": 0.4, "measured": 0.2})
    assert warmth.warmup_cost(batch(3)) is None


def test_cost_per_million_output_tokens():
    # 3.6 an hour is 0.001 a second: 10 s for 1,000 tokens is 0.01, so 10 a million
    assert cost.cost_per_million_output_tokens(3.6, 10.0, 1000) == pytest.approx(10.0)
    assert cost.cost_per_million_output_tokens(0.0, 10.0, 1000) == 0.0
    for blank in ((None, 10.0, 1000), (3.6, 0.0, 1000), (3.6, 10.0, 0), (3.6, 10.0, None)):
        assert cost.cost_per_million_output_tokens(*blank) is None
    run = run_of(batch(10), duration=2.0)  # 30 output tokens in 2 s at 5.4 an hour
    line, = (x for x in summary_table(run, 5.4).splitlines() if x.startswith("cost / M output tokens"))
    assert line.split()[5:8] == ["100.0000", "at", "5.4"], line  # 30 tokens in 2 s at 5.4 an hour
    assert "cost / M" not in summary_table(run)


def test_the_cli_refuses_a_negative_price(capsys):
    assert build_parser().parse_args(["run", "concurrent-10", "--price-per-gpu-hour", "2.5"]).price_per_gpu_hour == 2.5
    assert main(["run", "concurrent-10", "--url", "http://127.0.0.1:1", "--price-per-gpu-hour", "-1"]) != 0
    assert read("A price per GPU-hour of {price:g} cannot be used: give a price from 0 to 1,000,000 (any currency, for "
                "an hour of the whole machine).", capsys.readouterr().err) == {"price": "-1"}


@pytest.mark.server
def test_a_real_warmup_reports_its_cost_and_makes_the_run_warm(vllm_server):
    target = Target.at(vllm_server.base_url, vllm_server.model)
    assert target.instance and "started" in target.instance  # vLLM's /metrics says when it started
    runner = Runner(lambda r: r)
    spec = LoadSpec(base_url="", model="", prompts=["Say hi.", "Count to three."], shape="burst", num_requests=3,
                    max_tokens=8, warmup=3)
    run = runner.load(spec, target)
    cost = warmth.warmup_cost(run.records)
    assert cost is not None and cost.requests == 3 and cost.seconds > 0 and cost.ttft_s is not None
    assert cost.said.startswith("The warm-up (3 requests,") and "the measured batch's TTFT was" in cost.said
    assert (run.extra.warmth.cold, run.extra.warmth.why, run.extra.warmth.batch_size) == (False, warmth.WARMED_UP, 3)
    cold = runner.load(LoadSpec(base_url="", model="", prompts=["Say hi."], shape="burst", num_requests=2,
                                max_tokens=8), target)
    # this runner never saw 2 at once on this server (whatever others sent it: its memory is its own)
    assert (cold.extra.warmth.cold, cold.extra.warmth.batch_size, warmth.warmup_cost(cold.records)) == (True, 2, None)
