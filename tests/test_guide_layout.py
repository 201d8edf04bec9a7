"""The guided lab on a projector, what a test sees without a browser: bar labels stay level (they were
turned 90° on Tuning and History), the HTML report breaks Korean lines between words."""
from __future__ import annotations

import pytest

from engine import figures

from .guide_runs import _run


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_bar_labels_stay_level(lang):
    a = _run("tuning", "vllm", [(3.0, 10)] * 10, 10, at_once=True,
             label="max-model-len 2048, gpu-memory-utilization 0.85")
    b = _run("tuning", "vllm", [(2.8, 10)] * 10, 10, at_once=True,
             label="max-model-len 512, gpu-memory-utilization 0.90")
    fig = figures.tuning_compare([a, b], lang=lang)
    assert fig.layout.xaxis.tickangle == 0 and fig.layout.xaxis2.tickangle == 0
    many = [_run("concurrent-10", "vllm", [(1.0 + i / 10, 15)] * 10, 15, at_once=True) for i in range(12)]
    fig = figures.history_compare(many, lang=lang)
    assert fig.layout.xaxis.tickangle == 0
    longest = max((len(line) for cat in fig.layout.xaxis.ticktext for line in cat.split("<br>") if "<span" not in line),
                  default=0)  # one label for all: said once under the axis
    assert longest <= 18, longest


def test_the_korean_report_breaks_lines_between_words():
    from engine.figures.report import build_report

    run = _run("concurrent-10", "vllm", [(3.5, 15)] * 10, 15, at_once=True)
    html = build_report([run], "ko")
    assert ":lang(ko){word-break:keep-all" in html and "<html lang='ko'>" in html
