"""Numbers shown with the digits they have (issue #29 item 6, engine.digits): significant figures, not fixed
decimals, wherever a measured number is shown (the guided lab, History's table, the report, the CLI)."""
from __future__ import annotations

import pytest

from engine.digits import rounded, significant, times
from engine.figures.report import build_report
from engine.figures.runs_table import compare_table
from engine.guide import value_text
from engine.measure.judge.stats import summarize
from engine.messages import translate
from engine.results.records import RequestRecord, RunResult


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
