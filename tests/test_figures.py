"""engine.figures: each figure from hand-made runs shaped like the notebook's (Llama 3 8B on one GPU).

The `make_*` builders are also used to render the figures for review (see __main__ at the bottom:
`python tests/test_figures.py /tmp/figs`)."""
from __future__ import annotations

import copy
import math
import random
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest

from engine import digits, figures
from engine.figures import contenders
from engine.measure.workloads import prompts
from engine.measure.judge import verdict
from engine.measure.judge.stats import summarize
from engine.results.records import Notes, RequestRecord, RunResult, ServerNotes, Summary
from tests.said import said, tree, values

MODEL = "/models/meta-llama--Meta-Llama-3-8B-Instruct"
NAIVE_PROMPTS = prompts.LAB_SEQUENTIAL
CONCURRENT_PROMPTS = prompts.LAB_CONCURRENT


def streamed(index: int, prompt: str, send: float, ttft: float, tokens: int, tok_s: float,
             text: str = "", **kw) -> RequestRecord:
    """A streamed request: first chunk after ttft, then one chunk per token at tok_s."""
    first = send + ttft
    chunks = [first + k / tok_s for k in range(tokens)]
    return RequestRecord(index=index, prompt=prompt, send_time=send, end_time=chunks[-1] + 0.01,
                         first_token_time=first, chunk_times=chunks, prompt_tokens=len(prompt.split()) + 12,
                         output_tokens=tokens, output_text=text or f"Answer {index} " * 20, **kw)


def _run(kind, scenario, label, records, duration, **kw) -> RunResult:
    run = RunResult(kind=kind, scenario=scenario, label=label, records=records, duration=duration,
                    started_at=1_764_500_000.0, model=kw.pop("model", MODEL), **kw)
    run.summary = summarize(run.records, run.duration)
    return run


def make_naive() -> RunResult:
    lat = [4.3, 2.7, 3.9, 3.9, 3.9]
    tok = [201, 139, 201, 201, 201]
    recs, t = [], 0.0
    for i, (p, s, n) in enumerate(zip(NAIVE_PROMPTS, lat, tok)):
        recs.append(RequestRecord(index=i, prompt=p, send_time=t, end_time=t + s, prompt_tokens=20,
                                  output_tokens=n, tokens_source="tokenizer", output_text="..."))
        t += s + 0.02
    return _run("naive", "naive-5-sequential", "Naive transformers", recs, t, load={"max_tokens": 200})


def make_vllm_sequential() -> RunResult:
    lat = [3.4, 2.3, 3.4, 3.4, 3.4]
    recs, t = [], 0.0
    for i, (p, s) in enumerate(zip(NAIVE_PROMPTS, lat)):
        n = 200 if s > 3 else 135
        r = streamed(i, p, t, 0.05, n, (n - 1) / (s - 0.06))
        recs.append(r)
        t = r.end_time + 0.02
    return _run("vllm", "vllm-5-sequential", "vLLM", recs, t, load={"max_tokens": 200, "concurrency": 1})


def make_static_batch() -> RunResult:
    recs = [RequestRecord(index=i, prompt=p, send_time=0.0, end_time=4.6, prompt_tokens=20, output_tokens=200)
            for i, p in enumerate(NAIVE_PROMPTS)]
    return _run("static-batch", "static-batch-5", "Static batch (transformers)", recs, 4.6)


def make_concurrent(max_model_len: int = 2048, max_tokens: int = 150, tok_s: float = 40.0,
                    prompts=CONCURRENT_PROMPTS, kv_tokens: int | None = 105_000, model: str = MODEL,
                    placeholder_text: bool = False) -> RunResult:
    rng = random.Random(max_model_len)
    recs = []
    for i, p in enumerate(prompts):
        n = 24 if "haiku" in p else max_tokens
        recs.append(streamed(i, p, 0.002 * i, 0.08 + 0.01 * rng.random(), n, tok_s * (0.97 + 0.06 * rng.random())))
    dur = max(r.end_time for r in recs) + 0.01
    return _run("vllm", f"concurrent-{len(prompts)}", f"vLLM, max-model-len {max_model_len}", recs, dur,
                config={"max_model_len": max_model_len}, load={"concurrency": len(prompts), "max_tokens": max_tokens},
                extra=Notes(server=ServerNotes(kv_cache_tokens=kv_tokens or None, placeholder_text=placeholder_text)),
                model=model)


def make_timeline_run(n: int = 24, rate: float = 4.0, slots: int = 8) -> RunResult:
    """Poisson arrivals against a server that decodes at most `slots` at once: later requests queue."""
    rng = random.Random(7)
    t, recs, busy = 0.0, [], []  # busy: end times of requests holding a slot
    for i in range(n):
        t += rng.expovariate(rate)
        busy = sorted(e for e in busy if e > t)
        start = t if len(busy) < slots else busy[len(busy) - slots]
        ttft = (start - t) + 0.06 + 0.04 * rng.random()
        tokens = rng.choice([60, 90, 120, 150])
        r = streamed(i, CONCURRENT_PROMPTS[i % 10], t, ttft, tokens, 45 - 2 * min(len(busy), slots))
        if i == 17:
            r.error, r.chunk_times, r.first_token_time, r.output_tokens = "HTTP 500: engine error", [], None, 0
            r.end_time = t + 0.4
        busy.append(r.end_time)
        recs.append(r)
    dur = max(r.end_time for r in recs)
    return _run("vllm", "poisson-4rps", "vLLM, 4 req/s", recs, dur, load={"request_rate": rate})


def make_in_progress() -> tuple[RunResult, float]:
    run = make_concurrent()
    now = 2.0
    for r in run.records:
        r.chunk_times = [c for c in r.chunk_times if c <= now]
        if r.end_time > now:
            r.end_time = None
            r.output_tokens = len(r.chunk_times)
    run.records.append(RequestRecord(index=10, prompt="Just sent", send_time=1.9))
    return run, now


def make_stream() -> RunResult:
    r = streamed(0, "Explain PagedAttention in vLLM and why it matters for serving.", 0.0, 0.166, 300, 300 / 5.03)
    return _run("vllm", "streaming", "vLLM streaming", [r], r.end_time)


def make_sweep() -> list[RunResult]:
    runs = []
    for c, tp, ttft in [(1, 58, 40), (2, 112, 42), (4, 215, 47), (8, 400, 55), (16, 720, 71), (32, 1180, 110),
                        (64, 1610, 240)]:
        run = _run("vllm", "sweep", f"c={c}", [], 20.0, load={"concurrency": c})
        run.summary = Summary(output_throughput=float(tp), max_concurrency=c,
                              latency_ms={"median_ttft_ms": float(ttft)})
        runs.append(run)
    return runs


def make_slo_sweep() -> list[RunResult]:
    """A sweep with its requests, shaped like make_sweep's: each level keeps `level` requests of 128 tokens in
    flight for two rounds at its measured throughput, shared evenly (TPOT = level / throughput); the first
    token waits longer as the batch fills, and at 64 in flight most wait beyond 2 s (queued behind a full
    server), so with the default SLO the knee is 32."""
    runs = []
    for c, tp, ttft in [(1, 58, 0.04), (2, 112, 0.042), (4, 215, 0.047), (8, 400, 0.055), (16, 720, 0.071),
                        (32, 1180, 0.9), (64, 1610, 2.6)]:
        tpot, n = c / tp, 128
        round_s = n * c / tp  # one round of `c` answers at `tp` tok/s in total
        recs = [streamed(i, f"p{i}", (i // c) * round_s, ttft * (0.6 + 0.8 * i / (2 * c - 1)), n, 1 / tpot)
                for i in range(2 * c)]
        runs.append(_run("vllm", "sweep", f"concurrency {c}", recs, 2 * round_s, load={"concurrency": c}))
    return runs


def make_memory() -> tuple[list[dict], list[dict]]:
    t0 = 1_764_500_000.0
    samples = []
    for k in range(0, 121):
        t = float(k)
        gpu = 0.6 if t < 8 else 0.6 + min((t - 8) / 14, 1) * 15.4 if t < 30 else 16.0 if t < 38 else 121.5
        samples.append({"t": t0 + t, "used_gb": gpu, "total_gb": 143.8, "series": "GPU 0"})
        samples.append({"t": t0 + t, "used_gb": 3.1 + (2.5 if 8 <= t else 0) + (0.3 if t > 45 else 0),
                        "total_gb": 2015.6, "series": "CPU RAM"})
    events = [{"t": t0 + 0, "label": "start"}, {"t": t0 + 22, "label": "weights loaded"},
              {"t": t0 + 38, "label": "KV cache allocated"}, {"t": t0 + 48, "label": "ready"},
              {"t": t0 + 60, "label": "benchmark start"}, {"t": t0 + 95, "label": "benchmark end"},
              {"t": t0 + 110, "label": "stop"}]
    samples = [s for s in samples if s["t"] - t0 < 112 or s["series"] != "GPU 0"]
    return samples, events


def make_metrics() -> list[dict]:
    out, total = [], 0.0
    for k in range(0, 60):
        t = k * 0.5
        active = 5 <= t < 24
        running = min(64, int((t - 5) * 12)) if active else 0
        waiting = max(0, int((t - 5) * 20) - 64) if active and t < 14 else 0
        tok = running * 24.0
        total += tok * 0.5
        out.append({"t": t, "num_requests_running": running, "num_requests_waiting": waiting,
                    "kv_cache_usage_perc": min(0.97, running / 64 * 0.93), "generation_tokens_total": total})
    return out


# -- tests ------------------------------------------------------------------------------------------

def _bars(fig: go.Figure) -> list:
    return [t for t in fig.data if t.type == "bar"]


def test_template_is_large_and_registered():
    t = figures.template()
    assert t.layout.font.size >= 16 and t.layout.title.font.size >= 20
    fig = figures.latency_bars(make_naive(), make_vllm_sequential())
    assert fig.layout.template.layout.font.size >= 16


def test_latency_bars():
    naive, vllm = make_naive(), make_vllm_sequential()
    fig = figures.latency_bars(naive, vllm)
    bars = _bars(fig)
    assert len(bars) == 2 and all(len(b.y) == 5 for b in bars)
    assert list(bars[0].y) == pytest.approx([r.e2e for r in naive.records])
    assert "avg 3.7 s" in bars[0].name and "avg 3.2 s" in bars[1].name
    # one computation for the title and the caption: prompt by prompt, with its interval. The notebook's 1.18× from
    # one run a side is within the run-to-run allowance: measured, stated, not claimed
    v = contenders.speedup(naive, vllm)
    assert v.beyond_noise is False and v.low < 1 < v.high and v.allowance == verdict.BETWEEN_RUNS
    assert tree(figures.title_said(fig)) == {"id": "Latency per request: {speedup}",
                                             "speedup": {"id": "no difference beyond noise"}}
    (group,) = figures.caption_said(fig)
    within = tree(group)["sentence"]
    assert {k: within[k] for k in ("x", "low", "high", "level")} == {
        "x": "1.18", "low": digits.times(v.low), "high": digits.times(v.high), "level": "95 %"}
    assert within["how"]["method"] == {"id": "paired t on log values (the same prompts)"}
    assert within["how"]["counts"] == {"id": "{n} requests each", "n": 5}
    assert within["how"]["between"]["pct"] == "10"  # one run a side: the allowance is said
    fast = make_vllm_sequential()
    for r in fast.records:  # twice as fast as the notebook's vLLM: beyond any run-to-run allowance
        r.end_time = r.send_time + r.e2e / 2
    fig = figures.latency_bars(naive, fast)
    v = contenders.speedup(naive, fast)
    assert v.beyond_noise and tree(figures.title_said(fig))["speedup"] == {"id": "vLLM {x}× faster",
                                                                           "x": digits.times(v.ratio)}
    faster = tree(figures.caption_said(fig)[0])["sentence"]
    assert faster["id"].startswith("Prompt by prompt, vLLM answers {x}× faster than the naive loop")
    assert (faster["x"], faster["low"], faster["high"]) == tuple(digits.times(x) for x in (v.ratio, v.low, v.high))
    same = make_vllm_sequential()
    for r, n in zip(same.records, naive.records):  # within a few per cent either way of the naive loop's
        shift = 1.02 if r.index % 2 else 0.98
        r.end_time = r.send_time + n.e2e * shift
    one = figures.latency_bars(_run("naive", "naive-5-sequential", "n", naive.records[:1], 4.3),
                               _run("vllm", "vllm-5-sequential", "v", vllm.records[:1], 3.4))
    assert tree(figures.title_said(one))["speedup"] == {  # one prompt a side
        "id": "vLLM {x}× faster, noise unknown", "x": "1.26"}
    flat = figures.latency_bars(naive, same)
    assert tree(figures.title_said(flat))["speedup"] == {"id": "no difference beyond noise"}
    assert "faster" not in figures.caption(flat)
    fig3 = figures.latency_bars(naive, vllm, extra_runs=[make_static_batch()])
    assert len(_bars(fig3)) == 3
    assert figures.latency_bars(None, vllm).layout.title.text == "Latency per request"


def test_a_speed_up_without_a_ratio_says_the_verdict_itself():
    """speedup_said given a verdict on values not all above 0 (a difference, no ratio or ratio's interval): the
    verdict's own words, where it raised TypeError comparing None with 1 (per_prompt never makes one: latencies)."""
    v = verdict.compare([-1.0, 1.0, 2.0], [3.0, 4.0, 5.0], name="Latency", label_a="vLLM", label_b="naive")
    assert v.ratio is not None and v.low is None and v.diff_low is not None  # a ratio of means, no ratio interval
    assert contenders.speedup_said(v) == (v.short, v.said)
    v = verdict.compare([-2.0, -1.0], [1.0, 2.0], name="Latency", label_a="vLLM", label_b="naive")
    assert v.ratio is None
    assert contenders.speedup_said(v) == (v.short, v.said)


def test_concurrent_latency_bars():
    run = make_concurrent()
    fig = figures.concurrent_latency_bars(run)
    (bar,) = _bars(fig)
    assert len(bar.x) == len(run.records) == 10
    assert bar.y[0].startswith("#1  What causes high blood")
    assert all(len(lab) <= len("#10  ") + 30 for lab in bar.y)
    wall = fig.layout.shapes[0]
    assert wall.x0 == wall.x1 == pytest.approx(run.duration) and wall.line.dash == "dash"
    serial = sum(r.e2e for r in run.records)
    assert f"{serial:.0f} s" in figures.caption(fig)


def test_a_run_served_one_after_another_claims_no_batching():
    """The vLLM step of Naive vs vLLM runs its prompts one after another: its bars must not say 'at once'."""
    run = make_vllm_sequential()
    fig = figures.concurrent_latency_bars(run)
    assert "one after another" in fig.layout.title.text and "at once" not in fig.layout.title.text
    assert "nothing was batched" in figures.caption(fig)
    assert "at once" in figures.concurrent_latency_bars(make_concurrent()).layout.title.text


def test_a_run_with_fewer_in_flight_than_requests_says_up_to_how_many_at_once():
    """Kept to 4 in flight (or a chat's turns), 10 requests were not all at once: the title and caption say how
    many were."""
    recs = [streamed(i, f"p{i}", (i // 4) * 2.0, 0.08, 40, 40.0) for i in range(10)]  # 4, 4, then 2 at a time
    run = _run("vllm", "concurrent-4", "4 in flight", recs, max(r.end_time for r in recs) + 0.01)
    fig = figures.concurrent_latency_bars(run)
    title = tree(figures.title_said(fig))
    assert title["id"].startswith("{count} requests, up to {peak} at once: all done in {wall} s")
    assert (title["count"], title["peak"]) == (10, 4)
    said_first = figures.caption_said(fig)[0]
    assert said(said_first).template.startswith("Up to {peak} of the {done} requests")
    assert {k: values(said_first)[k] for k in ("peak", "done")} == {"peak": 4, "done": 10}


def test_request_timeline_segments_match_records():
    run = make_timeline_run()
    fig = figures.request_timeline(run, show_tokens=False)
    wait, dec, fail = fig.data[0], fig.data[1], fig.data[2]
    ok = [r for r in sorted(run.records, key=lambda r: (r.send_time, r.index)) if r.error is None]
    assert len(wait.x) == len(dec.x) == len(ok)
    for k, r in enumerate(ok):
        assert wait.base[k] == pytest.approx(r.send_time)
        assert wait.base[k] + wait.x[k] == pytest.approx(r.first_token_time)
        assert dec.base[k] == pytest.approx(r.first_token_time)
        assert dec.base[k] + dec.x[k] == pytest.approx(r.end_time)
    bad = [r for r in run.records if r.error]
    assert len(fail.x) == len(bad) == 1
    assert fail.base[0] + fail.x[0] == pytest.approx(bad[0].end_time)
    assert "in flight" in fig.layout.title.text


def test_request_timeline_in_progress_drawn_to_now():
    run, now = make_in_progress()
    fig = figures.request_timeline(run, now=now, show_tokens=True)
    wait, dec = fig.data[0], fig.data[1]
    # every decode bar of an unfinished request ends at now; the just-sent one waits up to now
    assert max(b + x for b, x in zip(dec.base, dec.x)) == pytest.approx(now)
    assert wait.base[-1] + wait.x[-1] == pytest.approx(now)
    assert any(s.x0 == now for s in fig.layout.shapes)
    assert "still in flight" in figures.caption(fig)
    ticks = fig.data[-1]
    assert ticks.name == "token arrivals" and max(ticks.x) <= now
    assert len(ticks.x) == sum(len(r.chunk_times) for r in run.records)


def test_naive_timeline_says_one_at_a_time():
    naive = make_naive()
    fig = figures.request_timeline(naive)
    assert "one request at a time" in fig.layout.title.text
    # not streamed: no first-token time, so one whole bar per request, no orange "waiting" part
    assert len(fig.data[0].x) == 0 and len(fig.data[1].x) == 0
    whole = fig.data[4]
    assert whole.name.startswith("whole request") and len(whole.x) == 5
    assert [b + x for b, x in zip(whole.base, whole.x)] == pytest.approx([r.end_time for r in naive.records])


def test_throughput_over_time():
    run = make_concurrent()
    fig = figures.throughput_over_time(run)
    (line,) = fig.data
    total = sum(r.output_tokens for r in run.records)
    # step values integrate back to the token count; the short last bucket ends at the run's end
    widths = [b - a for a, b in zip(line.x, line.x[1:])]
    assert sum(w * v for w, v in zip(widths, line.y[:-1])) == pytest.approx(total)
    assert line.x[0] == 0 and line.x[-1] == pytest.approx(run.duration)
    assert "avg" in line.name
    fig2 = figures.throughput_over_time([run, make_concurrent(512, 100)])
    assert len(fig2.data) == 2


def test_throughput_over_a_run_of_just_over_one_bucket_keeps_its_short_tail():
    """A 1.1-s run: two buckets, the second too short to stand alone, so it joins the first (a real
    8-token run once made this index past the end of the list: the report and History failed)."""
    recs = [streamed(0, "q", 0.0, 0.05, 40, 40 / 1.0)]  # last token at ~1.03 s
    run = _run("vllm", "vllm-5-sequential", "short", recs, 1.1)
    (line,) = figures.throughput_over_time(run).data
    assert len(line.x) == 2 and line.x[-1] == pytest.approx(1.1)  # one bucket, up to the run's end
    assert line.y[0] * 1.1 == pytest.approx(40)  # every token counted once


def test_tuning_compare():
    a, b = make_concurrent(2048, 150), make_concurrent(512, 100, kv_tokens=None)
    fig = figures.tuning_compare([a, b])
    tput, wall = _bars(fig)
    assert len(tput.x) == 2 and list(wall.y) == pytest.approx([a.duration, b.duration])
    assert tput.y[0] == pytest.approx(a.summary.get("output_throughput"))
    assert "KV cache 105 k tok" in tput.x[0] and "KV" not in tput.x[1]
    assert "max_tokens (100 vs 150)" in figures.caption(fig)


def _repeated(run: RunResult, group: str, values: list[float]) -> list[RunResult]:
    """`run` measured len(values) times as one repeat group, each with its own throughput."""
    out = []
    for i, v in enumerate(values):
        r = copy.deepcopy(run)
        r.id, r.started_at = f"{group}{i}", run.started_at + i
        r.summary.output_throughput = v
        r.extra.repeat.group, r.extra.repeat.index, r.extra.repeat.total = group, i + 1, len(values)
        out.append(r)
    return out


def test_tuning_compare_calls_a_difference_real_only_beyond_noise():
    """Once "+254 %" headed a tuning finding that the run-to-run spread explained. One run a configuration
    decides nothing; repeats are one bar each (the median, a whisker over the range) and judged by the verdict."""
    a, b = make_concurrent(2048, 150), make_concurrent(512, 150, kv_tokens=None)
    once = figures.caption(figures.tuning_compare([a, b]))
    assert "noise unknown" in once and "no difference here is called real" in once and "beyond noise" not in once
    quiet = _repeated(a, "g1", [100.0, 104.0, 98.0]) + _repeated(b, "g2", [150.0, 148.0, 153.0])
    fig = figures.tuning_compare(quiet)
    tput, wall = _bars(fig)
    gm_a, gm_b = (100.0 * 104.0 * 98.0) ** (1 / 3), (150.0 * 148.0 * 153.0) ** (1 / 3)
    assert list(tput.y) == pytest.approx([gm_a, gm_b]) and len(tput.x) == 2
    assert list(tput.error_y.array) == pytest.approx([104.0 - gm_a, 153.0 - gm_b])
    assert list(tput.error_y.arrayminus) == pytest.approx([gm_a - 98.0, gm_b - 148.0])
    changes, judged, bars = (tree(m) for m in figures.caption_said(fig))
    assert changes["id"] == "Throughput against {run}: {changes}."
    assert "1.49× (+49 %), beyond noise" in changes["changes"]
    assert judged["how"] == {"id": "{method}, {counts}", "counts": {"id": "{n} run each", "n": 3},
                             "method": {"id": "Welch's t on log values (a ratio of geometric means)"}}
    assert bars["id"].startswith("A configuration measured several times is one bar, the geometric mean of its runs")
    noisy = _repeated(a, "g1", [100.0, 130.0, 80.0]) + _repeated(b, "g2", [105.0, 125.0, 90.0])
    assert "no measurable difference" in figures.caption(figures.tuning_compare(noisy))


def test_the_tuning_bars_stand_where_the_verdict_compares():
    """Three repeats a side whose medians rank the settings one way and whose geometric means (what the caption's
    verdict, the guided lab's finding and its table compare) the other: the bars, their numbers and the caption
    tell one story (a screen showed bars 88 -> 95 under a finding of 93 -> 89 tok/s)."""
    from engine.measure.judge import verdict
    a, b = make_concurrent(2048, 150), make_concurrent(512, 150, kv_tokens=None)
    ra, rb = _repeated(a, "g1", [60.0, 100.0, 101.0]), _repeated(b, "g2", [90.0, 95.0, 120.0])
    v = verdict.compare_runs(ra, rb, "output_throughput", name="", label_a="a", label_b="b")
    tput, _wall = _bars(figures.tuning_compare(ra + rb))
    assert list(tput.y) == pytest.approx([v.center_a, v.center_b])
    assert (tput.y[1] > tput.y[0]) == (v.ratio > 1)  # medians 100 vs 95 would have drawn it the other way
    assert [t.replace("<b>", "").replace("</b>", "") for t in tput.text] == [
        digits.significant(v.center_a), digits.significant(v.center_b)]


def test_a_tuning_bars_value_is_not_drawn_under_its_whiskers_cap():
    """Seen on Tuning at 1920x1080 with repeats: each bar's value stood on the bar's top, where its whisker's cap is
    drawn, and the cap crossed "79" and "5.3 s". With whiskers the value is at the bar's foot; one run a
    configuration (no whisker) keeps it above the bar."""
    a, b = make_concurrent(2048, 150), make_concurrent(512, 150, kv_tokens=None)
    repeated = figures.tuning_compare(_repeated(a, "g1", [60.0, 100.0]) + _repeated(b, "g2", [90.0, 95.0]))
    for bar in _bars(repeated):
        assert bar.error_y.array is not None and bar.textposition != "outside" and bar.insidetextanchor == "start"
    for bar in _bars(figures.tuning_compare([a, b])):
        assert bar.error_y.array is None and bar.textposition == "outside"


def test_a_failed_repeat_is_no_zero_in_the_tuning_chart():
    """A repeat cut short when its server went away is left out of its configuration's median, range
    and verdict: it was no measurement."""
    a, b = make_concurrent(2048, 150), make_concurrent(512, 150, kv_tokens=None)
    runs = _repeated(a, "g1", [100.0, 104.0, 0.0]) + _repeated(b, "g2", [150.0, 148.0, 153.0])
    runs[2].extra.repeat.failed = True
    tput, wall = _bars(figures.tuning_compare(runs))
    gm = (100.0 * 104.0) ** 0.5
    assert list(tput.y) == pytest.approx([gm, (150.0 * 148.0 * 153.0) ** (1 / 3)])
    assert list(tput.error_y.arrayminus)[0] == pytest.approx(gm - 100.0)


def test_token_timeline():
    run = make_stream()
    fig = figures.token_timeline(run)
    names = [t.name for t in fig.data]
    assert names == ["without streaming", "with streaming"]
    assert max(fig.data[1].y) == pytest.approx(300)
    xs = sorted(s.x0 for s in fig.layout.shapes if s.type == "line")
    r = run.records[0]
    assert xs == pytest.approx([r.ttft, r.e2e])
    assert "166 ms" in fig.layout.title.text
    fig2 = figures.token_timeline(run.records[0])
    assert len(fig2.data) == 2


def test_sweep_chart():
    runs = make_sweep()
    fig = figures.sweep_chart(runs)
    assert len(fig.data) == 2 and list(fig.data[0].x) == [1, 2, 4, 8, 16, 32, 64]
    assert fig.layout.xaxis.type == "log"
    assert "1,610" in figures.caption(fig)
    # value labels stay off the line: a point the curve falls into is labelled on its right
    assert figures._label_sides([1, 5, 3, None, 4]) == ["top left", "top left", "top right", "top left", "top left"]


def test_pareto_chart_marks_the_knee_of_the_slo():
    """vLLM's Pareto view: per-user (x) against total (y) output tok/s, one point per level; filled where at
    least 90 % of requests met the SLO, hollow where fewer did, the knee ringed and named."""
    from engine.measure.judge import slo

    runs = make_slo_sweep()
    fig = figures.pareto_chart(runs)
    line = fig.data[0]
    summaries = [r.summary for r in runs]
    assert list(line.y) == [s.output_throughput for s in summaries]
    assert list(line.x) == pytest.approx([s.output_throughput / c for s, c in zip(summaries, (1, 2, 4, 8, 16, 32, 64))])
    assert [t.strip() for t in line.text] == ["1", "2", "4", "8", "16", "32", "64"]
    blue = line.line.color
    assert list(line.marker.color) == [blue] * 6 + ["white"]  # 64 in flight missed it
    knee = next(t for t in fig.data if t.name == "knee")
    assert (knee.x[0], knee.y[0]) == (line.x[5], line.y[5])
    assert [a.text for a in fig.layout.annotations] == ["knee: 32 in flight"]
    cap = figures.caption(fig)
    assert "The knee is 32 requests in flight" in cap and "at 64 only" in cap
    # a stricter SLO moves the knee down: TPOT <= 25 ms (40 tok/s per user) holds up to 16 in flight
    strict = figures.pareto_chart(runs, slo.Slo(ttft_ms=2000, tpot_ms=25))
    assert [a.text for a in strict.layout.annotations] == ["knee: 16 in flight"]
    # in Korean where a catalogue says it so; never an error
    assert figures.caption(figures.pareto_chart(runs, lang="ko"))
    assert figures.caption(figures.pareto_chart([])) == "No sweep levels to show yet."


def test_memory_chart():
    samples, events = make_memory()
    fig = figures.memory_chart(samples, events)
    assert {t.name for t in fig.data} >= {"GPU 0 used", "CPU RAM used"}  # one panel each
    lines = [s for s in fig.layout.shapes]
    assert len(lines) == 2 * len(events) and lines[0].x0 == 0  # epoch times shown relative
    labels = [a.hovertext for a in fig.layout.annotations if a.yref == "y domain"]
    assert labels == [e["label"] for e in events]
    assert "GPU 0 peaks at 122 GB of 144 GB" in figures.caption(fig)
    one = figures.memory_chart([s for s in samples if s["series"] == "GPU 0"], events)
    assert len(one.layout.shapes) == len(events)


def test_crowded_event_labels_never_overlap():
    """Ten events within a few seconds of a 300 s chart (the lab's quick vLLM steps): every line is drawn and
    every one numbered (whole labels piled up, or were left out), the numbers do not cover each other or run
    off the right edge, and the list under the chart names each number's event."""
    samples = [{"t": 1.7e9 + i, "used_gb": 10.0, "total_gb": 140.0, "series": "GPU 0"} for i in range(301)]
    events = [{"t": 1.7e9 + 250 + i, "label": f"step {i} of the lab, a long label"} for i in range(10)]
    events.append({"t": 1.7e9 + 299, "label": "vLLM stop"})
    fig = figures.memory_chart(samples, events)
    assert len(fig.layout.shapes) == len(events)
    notes = [a for a in fig.layout.annotations if a.yref == "y domain"]
    numbered = []  # a badge is one number or a range of them ("4–7") where no level had room
    for a in notes:
        first, _dash, last = a.text.strip("<b/>").partition("–")
        numbered += range(int(first), int(last or first) + 1)
        assert a.hovertext.split("<br>") == [label for n, _t, label in figures.event_list(events)
                                             if int(first) <= n <= int(last or first)]
    assert numbered == list(range(1, len(events) + 1))
    spans = []
    for a in notes[:-1]:  # the last badge may have grown into a range after it was placed
        w = (len(a.text.strip("<b/>")) * 11 + 14) / figures.PLOT_PX * 300
        lo, hi = (a.x - w, a.x) if a.xanchor == "right" else (a.x, a.x + w)
        assert 0 <= lo and hi <= 300
        spans.append((a.y, lo, hi))
    for i, (y1, a1, b1) in enumerate(spans):
        for y2, a2, b2 in spans[i + 1:]:
            assert y1 != y2 or b1 <= a2 or b2 <= a1


def test_metrics_chart():
    fig = figures.metrics_chart(make_metrics())
    assert [t.name for t in fig.data] == ["running", "waiting", "KV cache used", "generation tok/s"]
    assert max(v for v in fig.data[2].y if v is not None) > 80  # fraction shown as percent
    assert max(v for v in fig.data[3].y if v is not None) > 1000  # derived from the counter
    assert "KV cache peaked" in figures.caption(fig)


def test_live_charts_share_one_time_axis():
    """The Monitor's two charts drawn from the same telemetry, as the page draws them: memory is sampled
    from the first second, vLLM's /metrics only once the server is ready. The server's markers sit at
    the same x on both (the 'vLLM start' marker was at 50 s on the memory chart and at 0 s on the
    metrics chart), over the same span, so a viewer reads across them."""
    from engine.observe.telemetry import Sample, event_rows, memory_rows, metric_rows

    t0 = 1.7e9
    ready = 80
    samples = [Sample(t=t0 + i, memory=[{"series": "GPU 0", "used_gb": 1.0 if i < 50 else 120.0, "total_gb": 140.0}],
                      metrics={"running": 2.0, "waiting": 0.0, "kv_usage": 0.3,
                               "generation_tokens_total": 100.0 * i} if i >= ready else {})
               for i in range(121)]
    events = event_rows([(t0 + 50, "vLLM start"), (t0 + ready, "vLLM ready"), (t0 + 100, "concurrent-10 start")])
    memory, metrics = memory_rows(samples), metric_rows(samples)
    window = figures.time_window(memory, metrics, events)
    mem = figures.memory_chart(memory, events, window=window)
    met = figures.metrics_chart(metrics, events, window=window)

    def marker_xs(fig):  # one dotted line per event and panel: each event's x once
        return list(dict.fromkeys(shape.x0 for shape in fig.layout.shapes))

    assert marker_xs(mem) == marker_xs(met) == [50, ready, 100]
    assert mem.layout.xaxis.range == met.layout.xaxis.range == met.layout.xaxis3.range
    assert met.data[0].x[0] == ready and mem.data[0].x[0] == 0  # each series where it was sampled
    labels = {a.hovertext: (a.text, a.x) for a in mem.layout.annotations if a.yref == "y domain"}
    assert labels == {a.hovertext: (a.text, a.x) for a in met.layout.annotations if a.yref == "y domain"}
    assert labels["vLLM start"] == ("<b>1</b>", 50)  # numbered as the list under the charts numbers it
    assert [n for n, _t, _l in figures.event_list(events)] == [1, 2, 3]
    assert figures.time_window([], []) is None


def test_history_compare():
    runs = [make_naive(), make_vllm_sequential(), make_concurrent()]
    fig = figures.history_compare(runs, "output_throughput")
    (bar,) = _bars(fig)
    assert len(bar.x) == 3
    # one run each: a whole run's throughput has no measured noise, so none is named first
    assert figures.caption(fig).startswith("No run is named best: the two best cannot be told apart yet. Output ")
    fig = figures.history_compare(runs, "mean_ttft_ms")  # naive has no TTFT: left out
    assert len(_bars(fig)[0].x) == 2 and "left out" in figures.caption(fig)


def test_placeholder_model_is_labelled():
    run = make_concurrent(model="/x/llama3-8b-shape-only")
    for fig in (figures.concurrent_latency_bars(run), figures.request_timeline(run), figures.token_timeline(run)):
        assert "meaningless" in fig.layout.title.subtitle.text
        assert "meaningless" in figures.caption(fig)
    fig = figures.concurrent_latency_bars(make_concurrent(placeholder_text=True))
    assert "meaningless" in fig.data[0].hovertext[0]


def test_every_figure_has_short_title_and_caption():
    samples, events = make_memory()
    figs = [
        figures.latency_bars(make_naive(), make_vllm_sequential()),
        figures.concurrent_latency_bars(make_concurrent()),
        figures.request_timeline(make_timeline_run()),
        figures.throughput_over_time(make_concurrent()),
        figures.tuning_compare([make_concurrent(), make_concurrent(512, 100)]),
        figures.token_timeline(make_stream()),
        figures.sweep_chart(make_sweep()),
        figures.pareto_chart(make_slo_sweep()),
        figures.memory_chart(samples, events),
        figures.metrics_chart(make_metrics()),
        figures.history_compare([make_naive(), make_concurrent()]),
    ]
    for f in figs:
        assert 0 < len(f.layout.title.text) <= 60, f.layout.title.text
        cap = figures.caption(f)
        assert cap.endswith(".") and len(cap) > 20
    assert all(not math.isnan(v) for v in figs[0].data[0].y)


def test_to_png(tmp_path):
    fig = figures.latency_bars(make_naive(), make_vllm_sequential())
    out = figures.to_png(fig, tmp_path / "lat.png", width=900)
    assert out.suffix == ".png", "kaleido could not render with Chromium (make test installs it)"
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def render_all(folder: str | Path) -> list[Path]:
    """Every figure from the hand-made runs, as PNGs in `folder` (for eyeballing)."""
    folder = Path(folder)
    samples, events = make_memory()
    naive, seq = make_naive(), make_vllm_sequential()
    a = make_concurrent(2048, 150)
    b = make_concurrent(512, 100, tok_s=31, kv_tokens=420_000,
                        prompts=CONCURRENT_PROMPTS[:-1] + ["Summarize the history of AI."])
    prog, now = make_in_progress()
    shape = make_concurrent(model="/models/llama3-8b-shape-only")
    items = [
        (figures.latency_bars(naive, seq), "01_latency_bars.png"),
        (figures.latency_bars(naive, seq, [make_static_batch()]), "01b_latency_bars_static.png"),
        (figures.concurrent_latency_bars(a), "02_concurrent_latency_bars.png"),
        (figures.request_timeline(a), "03_request_timeline_concurrent.png"),
        (figures.request_timeline(make_timeline_run()), "03b_request_timeline_poisson.png"),
        (figures.request_timeline(prog, now=now), "03c_request_timeline_in_progress.png"),
        (figures.request_timeline(naive), "03d_request_timeline_naive.png"),
        (figures.throughput_over_time(a), "04_throughput_over_time.png"),
        (figures.throughput_over_time([a, b]), "04b_throughput_over_time_two.png"),
        (figures.tuning_compare([a, b]), "05_tuning_compare.png"),
        (figures.token_timeline(make_stream()), "06_token_timeline.png"),
        (figures.sweep_chart(make_sweep()), "07_sweep_chart.png"),
        (figures.pareto_chart(make_slo_sweep()), "07b_pareto_chart.png"),
        (figures.memory_chart(samples, events), "08_memory_chart.png"),
        (figures.metrics_chart(make_metrics()), "09_metrics_chart.png"),
        (figures.history_compare([naive, seq, a, b], "output_throughput"), "10_history_compare.png"),
        (figures.concurrent_latency_bars(shape), "11_shape_only_concurrent.png"),
    ]
    paths = figures.to_pngs([(f, folder / name) for f, name in items])
    (folder / "captions.txt").write_text(
        "\n".join(f"{name}: {f.layout.title.text} | {figures.caption(f)}" for f, name in items) + "\n")
    return paths


def test_a_korean_label_wraps_at_its_drawn_width():
    """Hangul is drawn about twice as wide as Latin letters: a label wraps where it would collide with its
    neighbour's (the KV chart's "줄인 KV 캐시" beside "여유 있는 KV 캐시" overlapped at 660 px)."""
    from engine.figures.theme import wrap

    assert wrap("KV cache squeezed", 10) == "KV cache<br>squeezed"
    assert wrap("줄인 KV 캐시", 10) == "줄인 KV<br>캐시"
    assert wrap("여유 있는 KV 캐시", 10) == "여유 있는<br>KV 캐시"
    # a flag longer than a line breaks after its hyphens, not into the next bar's label
    assert wrap("max-model-len 512, gpu-memory-utilization 0.90", 14) == (
        "max-model-len<br>512, gpu-<br>memory-<br>utilization<br>0.90")
    # a word wider than a line, cut: with a hyphen between two Latin letters ("concurre" / "nt" under eight bars on
    # History read as two words), never inside Hangul or a time, never losing a letter
    assert wrap("vLLM concurrency", 8) == "vLLM<br>concurr-<br>ency"
    assert wrap("동시요청여덟개", 8) == "동시요청<br>여덟개"
    # a time too wide breaks at its no-break space, the space dropped as any space at a break (left, it was drawn "-")
    assert wrap("5:52:44\u202fAM", 8) == "5:52:44<br>AM"



if __name__ == "__main__":
    for p in render_all(sys.argv[1] if len(sys.argv) > 1 else "/tmp/figs"):
        print(p)


def test_a_sweeps_caption_never_says_the_wait_grew_beside_a_chart_drawing_it_lower():
    """Seen on the Load page (a rate sweep at 0.5 and 1 requests/s on a CPU server, the first level cold): "the
    median wait for the first token goes from 288 to 218 ms: past what the server keeps up with, requests queue and
    the wait grows" beside a chart drawing the wait lower, both rates within the SLO."""
    from engine.figures.sweep import sweep_chart

    def sweep(levels, **load):
        runs = []
        for level, tp, ttft in levels:
            run = _run("vllm", "sweep", f"{level}", [], 20.0, load={**load, ("rate" if load else "concurrency"): level})
            run.summary = Summary(output_throughput=float(tp), latency_ms={"median_ttft_ms": float(ttft)})
            runs.append(run)
        return runs

    rated = figures.caption_said(sweep_chart(sweep([(0.5, 31, 288), (1.0, 61, 218)], shape="poisson")))[0]
    assert "keeps up" not in rated and "grows" not in rated
    assert values(rated) == {"c0": 0.5, "c1": 1.0, "t0": "31", "t1": "61", "f0": "288", "f1": "218"}
    closed = figures.caption_said(sweep_chart(sweep([(1, 58, 300), (4, 200, 120)])))[0]
    assert "longer" not in closed and "grows" not in closed and values(closed)["f1"] == "120"
    grew = figures.caption_said(sweep_chart(sweep([(1, 58, 40), (4, 200, 47)])))[0]
    assert "each waiting a little longer" in grew  # where it holds, still said
