"""Numbers shown with the digits they have (engine.digits): significant figures, not fixed
decimals, wherever a measured number is shown (the guided lab, History's table, the report, the CLI)."""
from __future__ import annotations

import pytest

from engine.digits import change, rounded, significant, times
from engine.figures import caption, caption_said
from engine.figures.report import build_report
from engine.figures.runs_table import compare_table
from engine.guide import value_text
from engine.measure.judge.stats import summarize
from engine.messages import translate
from engine.results.records import RequestRecord, RunResult
from tests.said import tree, values


@pytest.mark.parametrize("x, shown", [
    (0.4, "0.40"), (0.0034, "0.0034"), (0.0996, "0.10"), (1.234, "1.2"), (41.65, "42"), (9.96, "10"), (354, "354"),
    (12345.6, "12,346"), (-0.04, "-0.040"), (0, "0"), (None, "–"), (float("nan"), "–"), (float("inf"), "–")])
def test_a_number_keeps_two_significant_figures_and_its_whole_part(x, shown):
    assert significant(x) == shown


def test_a_table_s_number_is_rounded_to_the_same_figures_and_stays_a_number():
    """History's table sorts its columns, so its numbers stay numbers: 0.0412 tok/s was round(v, 1) = 0.0."""
    assert rounded(0.0412) == 0.041 and rounded(0.4) == 0.4 and rounded(354.6) == 355 and rounded(0) == 0
    assert rounded(None) is None and rounded(float("nan")) is None


def test_the_guided_lab_says_a_slow_decode_as_it_was_measured():
    """The guided lab showed "생성 속도 0 tok/s" where History said 0.40."""
    assert value_text(0.4, "tok/s") == "0.40 tok/s"
    assert translate(value_text(0.4, "tok/s"), "ko") == "0.40 tok/s"
    assert value_text(0.0004, "ms") == "0.00040 ms" and value_text(0.04, "s") == "0.040 s"
    assert translate(value_text(0.04, "s"), "ko") == "0.040초"


def _slow_run() -> RunResult:
    # one request of 2 tokens over 5 s: 0.40 tok/s, a TTFT of 0.3 ms
    recs = [RequestRecord(index=0, prompt="q", send_time=0.0, first_token_time=0.0003, end_time=5.0,
                          output_tokens=2)]
    run = RunResult(kind="vllm", scenario="s", label="slow", records=recs, duration=5.0, started_at=1.7e9)
    run.summary = summarize(recs, 5.0)
    return run


def test_history_and_the_report_keep_the_digits_of_a_slow_run():
    run = _slow_run()
    assert run.summary.output_throughput == pytest.approx(0.4)
    _cols, rows = compare_table([run])
    row = {r["Compared"]: r["1. slow"] for r in rows}
    assert row["Output tokens / s"] == "0.40" and row["Mean TTFT (ms)"] == "0.30"
    page = build_report([run], made_at=1.7e9)
    assert "0.40 tok/s" in page and "0.0 tok/s" not in page
    assert "; 1 run.</p>" in page and "run(s)" not in page  # a count said as one, not "1 run(s)"
    assert "; 2 runs.</p>" in build_report([run, _slow_run()], made_at=1.7e9)


def test_the_cli_summary_keeps_the_digits_of_a_slow_run():
    from engine.cli.summary import summary_table

    text = summary_table(_slow_run())
    assert "output throughput      0.40 tok/s" in text
    assert "TTFT mean / p99        0.30 ms" in text


@pytest.mark.parametrize("x, figures, shown", [
    (0.9996, 3, "1.00"), (0.09996, 3, "0.100"), (9.9996, 3, "10.0"), (99.96, 2, "100"), (0.99996, 2, "1.0")])
def test_a_rounding_that_carries_into_a_new_digit_keeps_the_figures_asked(x, figures, shown):
    """0.9996 to three figures is 1.00: the carry makes a new leading digit, and "1.000" would claim a fourth."""
    assert significant(x, figures) == shown


@pytest.mark.parametrize("ratio, shown", [
    (1.184, "1.18"), (0.9996, "1.00"), (9.996, "10"), (21.14, "21"), (354.2, "354"), (None, "–")])
def test_a_ratio_has_three_figures_below_ten_and_two_from_ten_up(ratio, shown):
    """The Naive page's chart, the guided lab's table and its finding say a speed-up through this one helper."""
    assert times(ratio) == shown


@pytest.mark.parametrize("ratio, shown", [
    (1.21, "+21"), (0.9997, "-0.030"), (1.0, "0"), (1 - 1e-15, "0"), (1 + 2e-13, "0"), (None, "–")])
def test_a_change_in_per_cent_says_no_float_noise(ratio, shown):
    """Two sides of exactly equal means (their order reversed) gave a ratio of 0.999999999999999: the verdict said
    "measured 1.00× (-0.00000000000010 %)"."""
    assert change(ratio) == shown


def test_a_median_and_its_range_share_the_decimals_of_the_largest_after_the_carry():
    from engine.measure.judge import repeats

    assert significant(0.38, 3, like=(0.41, 0.44)) == "0.380" and significant(1563.07, 3, like=(5629.59,)) == "1,563"
    assert significant(0, 3, like=(0.41,)) == "0.000" and significant(0, 3) == "0"
    s = repeats.spread([0.9996, 0.9994, 0.9997])
    assert s.said == "median 1.00, range 1.00–1.00 of 3 runs"  # was "median 1.000, range 0.999–1.000"


def test_a_verdict_says_a_ratio_just_under_one_with_three_figures():
    from engine.measure.judge import verdict

    v = verdict.compare([100.0, 101.0, 99.0], [99.96, 100.97, 98.96], label_a="A", label_b="B", per=verdict.RUNS)
    assert str(v.effect).startswith("1.00× (") and "1.000" not in v.effect
    assert "1.000" not in (v.interval or "")


def _fast_run(kind: str, label: str, e2e: float, tokens: int = 2) -> RunResult:
    recs = [RequestRecord(index=i, prompt=f"q{i}", send_time=0.0, first_token_time=e2e / 4, end_time=e2e,
                          output_tokens=tokens) for i in range(3)]
    run = RunResult(kind=kind, scenario="s", label=label, records=recs, duration=e2e, started_at=1.7e9)
    run.summary = summarize(recs, e2e)
    return run


def test_the_naive_page_s_charts_keep_the_digits_of_a_fast_request():
    """A 40 ms answer was "0.0 s" on the bars, in the legend and in the whole job's caption."""
    from engine.figures.contenders import contenders_chart, latency_bars

    fast = _fast_run("vllm", "fast", 0.04)
    fast.scenario = "vllm-5-sequential"  # contender 3: vLLM one at a time
    bars = latency_bars(None, fast)
    assert bars.data[0].text[0] == "0.040" and "(avg 0.040 s)" in bars.data[0].name, bars.data[0].name
    assert "latency 0.040 s · 2 tokens · 50 tok/s" in bars.data[0].hovertext[0]
    job = contenders_chart([None, None, fast])
    assert "in 0.040 s; run the others to compare" in caption(job)


def test_the_tuning_finding_says_a_slow_throughput_with_its_digits():
    """0.40 → 0.60 tok/s was "Throughput 0 → 1 tok/s (+50%)"."""
    from engine.guide.findings import tuning_said

    a, b = _fast_run("vllm", "512", 5.0), _fast_run("vllm", "2048", 5.0)
    said = tuning_said({"a": [a], "b": [b], "tput_a": 0.40, "tput_b": 0.60, "verdict": None})
    assert {k: v for k, v in tree(said).items() if k not in ("id", "why")} == {
        "a": "0.40", "b": "0.60", "change": "+50 %", "first": "512", "second": "2048"}
    assert translate(said, "ko").startswith("512에서 2048로 바꾸자 처리량이 0.40 → 0.60 tok/s(+50 %)")


def test_the_worker_s_memory_sentence_keeps_a_small_peak():
    from engine.measure.judge.worker_memory import said

    m = {"exited": True, "gpu": True, "worker_peak_gb": 0.004, "before_gb": 14.59, "after_gb": 14.6, "left_gb": 0.01}
    assert tree(said(m)) == {"id": "The naive worker's process has exited: the GPU uses {after} GB again, as before "
                                   "the run ({before} GB); the worker's peak was {peak}.",
                             "after": "15", "before": "15", "peak": {"id": "{v} GB", "v": "0.0040"}}


def test_the_server_metrics_chart_keeps_a_small_kv_usage_and_rate():
    from engine.figures.machine import metrics_chart

    samples = [{"t": 100.0 + k, "running": 1, "waiting": 0, "kv_usage": 0.004, "gen_tok_s": 0.4} for k in range(3)]
    fig = metrics_chart(samples)
    kv, tok = fig.data[2], fig.data[3]
    assert kv.text[0] == "0.40" and "%{text}%" in kv.hovertemplate
    assert tok.text[0] == "0.40" and "%{text} tok/s" in tok.hovertemplate
    assert "the KV cache peaked at 0.40 % full" in caption(fig)


def test_a_rehearsed_step_s_length_is_not_zero_seconds():
    from engine.guide.sheet import length

    assert length(0.4) == "0.40 s" and length(121) == "121 s" and length(5400, 90) == "90 min"


@pytest.mark.parametrize("x, en, ko", [
    (0.04, "0.040 s", "0.040초"), (0.004, "0.0040 s", "0.0040초"), (0.25, "0.25 s", "0.25초"), (4.1, "4.1 s", "4.1초"),
    (12.34, "12 s", "12초"), (1234.4, "1,234 s", "1,234초"), (0, "0 s", "0초")])
def test_a_time_in_seconds_keeps_its_significant_figures(x, en, ko):
    """engine.messages.seconds wrote one fixed decimal: 0.04 s was "0.0 s" on Tuning's wall-time bars, the room's
    chart and the KV-cache TTFT bars."""
    from engine.messages import seconds

    assert seconds(x, "en") == en and seconds(x, "ko") == ko
    assert seconds("%{y:.2f}", "en") == "%{y:.2f} s"  # a plotly hover field goes through as it is


def test_the_tuning_chart_s_wall_time_keeps_a_short_run_s_digits():
    from engine.figures.compare import tuning_compare

    a, b = _fast_run("vllm", "512", 0.04), _fast_run("vllm", "2048", 0.06)
    a.duration, b.duration = 0.04, 0.06
    wall = tuning_compare([a, b]).data[1]
    assert list(wall.text) == ["<b>0.040 s</b>", "<b>0.060 s</b>"]


def test_tuning_s_bars_and_one_configuration_s_caption_keep_a_slow_throughput():
    """0.40 tok/s was "0" on Tuning's throughput bar and "0 tok/s" in its caption."""
    from engine.figures.compare import tuning_compare

    fig = tuning_compare([_slow_run()])
    assert list(fig.data[0].text) == ["<b>0.40</b>"]
    assert "slow: 0.40 tok/s, 5.0 s wall time." in caption(fig)


def test_side_by_side_keeps_a_slow_pair_s_digits():
    """Two slow servers "sustained 0 tok/s and 0 tok/s", their median TTFT "0 ms"."""
    from engine.figures.compare import side_by_side

    a, b = _slow_run(), _slow_run()
    b.label = "other"
    fig = side_by_side(a, b)
    sustained, ttft = (values(m) for m in caption_said(fig)[:2])
    assert (sustained["avg_a"], sustained["avg_b"]) == ("0.40", "0.40"), sustained
    assert (ttft["ttft_a"], ttft["ttft_b"]) == ("0.30", "0.30"), ttft
    assert "(avg 0.40 tok/s)" in fig.data[3].name


def test_the_cli_s_run_line_keeps_a_slow_run_s_digits(tmp_path):
    """`done in 5.00 s: 1 ok, 0 failed, 0.4 output tok/s, mean TTFT 0 ms`."""
    import io

    from engine.cli.console import Console

    out = io.StringIO()
    Console(out, log_dir=tmp_path).on_complete(_slow_run())
    assert "0.40 output tok/s, mean TTFT 0.30 ms" in out.getvalue(), out.getvalue()
