"""engine.measure.judge.slo: goodput, SLO attainment and a sweep's knee from hand-made records with known answers,
goodput against vLLM's own calculate_metrics, and where it is kept (the summary, the export, the CLI)."""
from __future__ import annotations

import json
import math

import pytest

from engine.errors import ConfigError
from engine.measure.judge import slo, stats
from engine.measure.judge.slo import DEFAULT_SLO, Slo, Verdict
from engine.results.records import Notes, RequestRecord, RunResult, RunRow, Summary
from tests.said import said, values

SAID_SLO = {"first": {"name": "TTFT", "ms": 2000}, "second": {"name": "TPOT", "ms": 100}}  # DEFAULT_SLO, as said


def req(index: int, ttft: float, tokens: int, tpot: float, send: float = 0.0, warmup: bool = False) -> RequestRecord:
    """A streamed answer: its first token `ttft` s after `send`, then one token every `tpot` s."""
    first = send + ttft
    chunks = [first + k * tpot for k in range(tokens)]
    return RequestRecord(index=index, prompt=f"p{index}", send_time=send, first_token_time=first,
                         chunk_times=chunks, end_time=chunks[-1], prompt_tokens=10, output_tokens=tokens,
                         warmup=warmup)


def failed(index: int) -> RequestRecord:
    return RequestRecord(index=index, prompt=f"p{index}", send_time=0.0, end_time=0.3, error="HTTP 500: boom")


def run_of(records: list[RequestRecord], duration: float, concurrency: int | None = None) -> RunResult:
    run = RunResult(kind="vllm", scenario="sweep", label="run", records=records, duration=duration,
                    started_at=1_764_500_000.0, model="m", load={"concurrency": concurrency})
    run.summary = stats.summarize(records, duration)
    return run


def handcrafted() -> list[RequestRecord]:
    """Judged by the default SLO (TTFT <= 2000 ms, TPOT <= 100 ms), over 4 s: 2 good of 5 measured."""
    return [
        req(0, ttft=0.5, tokens=11, tpot=0.1),  # TPOT exactly 100 ms: a limit met exactly counts -> good
        req(1, ttft=2.5, tokens=11, tpot=0.05),  # TTFT 2500 ms -> not good
        req(2, ttft=0.2, tokens=5, tpot=0.2),  # TPOT 200 ms -> not good
        req(3, ttft=1.0, tokens=1, tpot=0.0),  # one token: its TPOT counts as 0 (vLLM's rule) -> good
        failed(4),  # failed -> not good, and still one of the requests
        req(5, ttft=0.1, tokens=3, tpot=0.01, warmup=True),  # warm-up -> not counted at all
    ]


def test_goodput_of_a_handcrafted_run_is_the_hand_computation():
    recs = handcrafted()
    assert stats.tpot(recs[0]) == 0.1  # the boundary case really sits on the limit
    v = slo.judge(run_of(recs, 4.0), DEFAULT_SLO)
    assert (v.good, v.requests) == (2, 5)
    assert v.goodput == 2 / 4.0 and v.attainment == 2 / 5 and not v.meets
    # stats.summarize, the Summary's request_goodput, counts the same way
    assert stats.summarize(recs, 4.0, goodput_slo=DEFAULT_SLO.goodput_config()).request_goodput == 0.5
    assert values(v.said) == {"n": 5, "good": 2, "share": 0.4, "slo": SAID_SLO, "target": 0.9, "goodput": 0.5}
    # each limit alone
    assert slo.judge(run_of(recs, 4.0), Slo(ttft_ms=2000)).good == 3
    assert slo.judge(run_of(recs, 4.0), Slo(tpot_ms=100)).good == 3
    assert slo.judge(run_of(recs, 4.0), Slo(e2el_ms=1000)).good == 2  # requests 2 and 3 (E2E 1.0 s each)


def test_goodput_matches_vllms_own_calculate_metrics():
    """vLLM's calculate_metrics with --goodput on the same requests gives the same goodput, a limit met
    exactly included (a TTFT of 2.007 s against 2007 ms is good for vLLM, which compares in seconds; in
    milliseconds 2.007 * 1000 is 2007.0000000000002, over the limit)."""
    serve = pytest.importorskip("vllm.benchmarks.serve")
    from .test_stats import vllm_outputs

    recs = handcrafted() + [req(6, ttft=2.007, tokens=4, tpot=0.05)]
    outputs = vllm_outputs(recs)
    run = run_of(recs, 4.0)
    for limits in (DEFAULT_SLO, Slo(ttft_ms=2007), Slo(ttft_ms=2006.9), Slo(tpot_ms=150),
                   Slo(ttft_ms=600, tpot_ms=100, e2el_ms=1500)):
        m, _ = serve.calculate_metrics(input_requests=[], outputs=outputs, dur_s=4.0, tokenizer=None,
                                       selected_percentiles=[99.0], goodput_config_dict=limits.goodput_config())
        v = slo.judge(run, limits)
        assert v.goodput == m.request_goodput, limits
        assert stats.summarize(recs, 4.0, goodput_slo=limits.goodput_config()).request_goodput == m.request_goodput
    assert slo.judge(run, Slo(ttft_ms=2007)).good == 4 and slo.judge(run, Slo(ttft_ms=2006.9)).good == 3


def test_a_share_is_never_rounded_up_to_the_target():
    v = Verdict(DEFAULT_SLO, good=899, requests=1000, duration=10.0)
    assert not v.meets and "(89%)" in v.said and "less than 90%" in v.said
    v = Verdict(DEFAULT_SLO, good=9, requests=10, duration=10.0)
    assert v.meets and v.said.startswith("9 of 10 requests (90%) met the SLO") and "so it holds" in v.said
    assert Verdict(DEFAULT_SLO, good=1, requests=1, duration=2.0).said.startswith("1 of 1 request (100%)")
    assert Verdict(DEFAULT_SLO, good=0, requests=0, duration=0.0).attainment is None


@pytest.mark.parametrize("limits, says", [
    (dict(ttft_ms=0), "The TTFT limit must be a number of milliseconds above 0, not 0."),
    (dict(tpot_ms=-5.0), "The TPOT limit must be a number of milliseconds above 0, not -5.0."),
    (dict(ttft_ms=math.nan), "not nan."),
    (dict(e2el_ms=math.inf), "The E2E latency limit must be"),
    (dict(ttft_ms=True), "not True."),
    (dict(), "An SLO needs at least one limit"),
])
def test_a_limit_that_is_no_limit_is_one_sentence(limits, says):
    with pytest.raises(ConfigError) as e:
        Slo(**limits)
    assert says in str(e.value) and str(e.value).endswith(".")


def test_a_stored_slo_reads_back_only_when_it_is_one():
    assert Slo.from_config(DEFAULT_SLO.goodput_config()) == DEFAULT_SLO == Slo.from_config({"ttft": 2000, "tpot": 100})
    assert Slo.from_config({"e2el": 1500.0}) == Slo(e2el_ms=1500.0)
    for bad in (None, {}, {"ttft": -1}, {"ttft": "fast"}, {"itl": 50}, ["ttft", 2000], "ttft:2000"):
        assert Slo.from_config(bad) is None, bad
    assert DEFAULT_SLO.said == "TTFT ≤ 2000 ms and TPOT ≤ 100 ms"
    assert Slo(ttft_ms=250, tpot_ms=20.5, e2el_ms=3000).said == ("TTFT ≤ 250 ms, TPOT ≤ 20.5 ms and E2E latency ≤ "
                                                                 "3000 ms")


def test_goodput_is_kept_under_vllms_key_with_its_slo_and_exported():
    from engine.results.vllm_bench import from_bench_json, to_bench_json

    run = run_of(handcrafted(), 4.0)
    assert run.summary.request_goodput is None and run.extra.slo.goodput_ms is None  # none asked for
    slo.record_goodput(run, DEFAULT_SLO)
    assert run.summary.request_goodput == 0.5 and run.extra.slo.goodput_ms == {"ttft": 2000.0, "tpot": 100.0}
    obj = json.loads(json.dumps(to_bench_json(run)))
    assert obj["request_goodput"] == 0.5  # where vllm bench serve --goodput writes it
    back = from_bench_json(obj)
    assert back.summary.request_goodput == 0.5 and back.extra.slo.goodput_ms == {"ttft": 2000.0, "tpot": 100.0}
    older = Notes.from_dict({"load_client": {"name": "aiohttp"}})  # a run from before the SLO was kept
    assert older.slo.goodput_ms is None


def test_the_cli_summary_says_goodput_when_an_slo_was_given():
    from engine.cli.summary import summary_table

    run = run_of(handcrafted(), 4.0)
    assert "goodput" not in summary_table(run)
    lines = summary_table(slo.record_goodput(run, DEFAULT_SLO)).splitlines()
    assert lines[-2] == "goodput                0.50 req/s"
    assert lines[-1] == "  " + slo.judge(run, DEFAULT_SLO).said


def test_the_runner_keeps_each_runs_goodput_under_the_slo_it_was_given():
    """A load run through engine.runs.Runner against a real (fake-answering) OpenAI-style server: with an
    SLO no answer of a local server can miss, every request is good."""
    from tests.fakes import FakeOpenAIServer

    from engine.measure.load.spec import LoadSpec
    from engine.runs import Runner, Target

    saved = []
    with FakeOpenAIServer() as srv:
        spec = LoadSpec(base_url=srv.base_url, model="ok", prompts=["hi"], num_requests=6, shape="burst",
                        max_tokens=5, timeout_s=10, read_timeout_s=5)
        run = Runner(lambda r: saved.append(r) or r, slo=Slo(ttft_ms=60_000, tpot_ms=60_000)).load(
            spec, Target(srv.base_url, "ok"))
    assert saved == [run] and run.summary.completed == 6
    assert run.summary.request_goodput == pytest.approx(6 / run.duration)
    assert run.extra.slo.goodput_ms == {"ttft": 60_000.0, "tpot": 60_000.0}


# -- a sweep's knee -------------------------------------------------------------------------------

def sweep(good: dict[int, int], n: int = 10) -> list[RunResult]:
    """One run per level (requests in flight): `n` requests of 11 tokens over 10 s, good[level] of them
    within the default SLO, the rest with a 3 s first token. Output throughput 11 tok/s at every level,
    so a level's per-user throughput is 11 / level."""
    return [run_of([req(i, 0.5 if i < g else 3.0, 11, 0.05) for i in range(n)], 10.0, concurrency=level)
            for level, g in good.items()]


def test_the_knee_is_the_most_requests_in_flight_that_met_the_slo():
    points = slo.levels(sweep({1: 10, 2: 10, 4: 9, 8: 8, 16: 2}), DEFAULT_SLO)
    assert [p.users for p in points] == [1, 2, 4, 8, 16]
    assert [p.verdict.meets for p in points] == [True, True, True, False, False]  # 9 of 10 is exactly 90 %
    k = slo.knee(points)
    assert (k.users, k.total, k.per_user) == (4, 11.0, 11.0 / 4)
    assert values(slo.knee_said(points, DEFAULT_SLO)) == {"users": 4, "target": 0.9, "slo": SAID_SLO, "total": 11.0,
                                                          "per_user": 2.75, "next": 8, "share": 0.8}


def test_the_knee_when_a_lower_level_missed_none_met_or_all_did():
    # the most that met, though a lower level missed (a noisy level is not the knee)
    assert slo.knee(slo.levels(sweep({1: 10, 2: 5, 4: 10, 8: 0}), DEFAULT_SLO)).users == 4
    none = slo.levels(sweep({1: 5, 2: 0}), DEFAULT_SLO)
    assert slo.knee(none) is None
    assert values(slo.knee_said(none, DEFAULT_SLO)) == {"slo": SAID_SLO, "target": 0.9, "users": 1}
    assert said(slo.knee_said(none, DEFAULT_SLO)).template.startswith("No level met")
    top = slo.levels(sweep({1: 10, 2: 10}), DEFAULT_SLO)
    assert slo.knee(top).users == 2
    assert values(slo.knee_said(top, DEFAULT_SLO)) == {"users": 2, "target": 0.9, "slo": SAID_SLO, "total": 11.0,
                                                       "per_user": 5.5}
    assert "sweep higher" in slo.knee_said(top, DEFAULT_SLO)


def test_levels_without_requests_are_drawn_but_not_judged():
    """A sweep read back from the history list (rows carry no requests): placed by their summaries, never
    called a knee."""
    rows = [RunRow(id=f"r{c}", kind="vllm", scenario="sweep", label=f"concurrency {c}", started_at=1.7e9,
                   duration=10.0, model="m", n_requests=10, n_failed=0, source="local", saved_at=1.7e9,
                   summary=Summary(output_throughput=40.0 * c, max_concurrency=c)) for c in (1, 2)]
    points = slo.levels(rows, DEFAULT_SLO)
    assert [(p.users, p.total, p.verdict) for p in points] == [(1, 40.0, None), (2, 80.0, None)]
    assert slo.knee(points) is None
    assert "cannot be judged" in slo.knee_said(points, DEFAULT_SLO)
