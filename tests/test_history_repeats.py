"""The repeats of one load test are one line of History: their medians over the repeats that
answered every request, expandable to each repeat, and selected together. Through app.py with AppTest."""
from __future__ import annotations


import pytest
from streamlit.testing.v1 import AppTest

from tests.test_store import make_run

from engine.measure.judge import failures, repeats
from tests.conftest import app_page



@pytest.fixture(scope="module", autouse=True)
def lab(lab):
    """The app's Lab (conftest) on a history of three repeats, one failed, and a run alone."""
    for i, tput in enumerate((100.0, 120.0, 0.0)):  # the third repeat failed: its zero is no measurement
        run = make_run(1_764_500_000.0 + i * 10, "repeated")
        run.extra.repeat.group, run.extra.repeat.index, run.extra.repeat.total = "g1", i + 1, 3
        run.extra.repeat.failed = tput == 0.0
        run.summary.output_throughput = tput
        run.duration = (2.0, 3.0, 0.5)[i]
        lab.store.save(run)
    lab.store.save(make_run(1_764_400_000.0, "alone"))
    return lab


def page() -> AppTest:
    return app_page("app_pages/history.py")


def test_repeats_are_one_line_with_the_median_of_those_that_answered():
    df = page().dataframe[0].value
    assert list(df["run"]) == ["repeated · 3 of 3 repeats, medians of 2", "alone"]
    assert df["output tok/s"][0] == 110.0 and df["status"][0] == "◐ some failed"
    # a median beside the medians, of the same repeats (the line's wall time was the sum of all three: 5.5 s)
    assert df["wall time (s)"][0] == 2.5  # the median of 2.0 and 3.0: the failed repeat's 0.5 s left out too


def test_the_repeats_that_count_are_one_rule_for_the_page_the_report_and_the_cli():
    """History counted a repeat by a rule of its own (not failed, not all-failed); the engine's counted_repeats
    left out only the failed repeats. One rule now: a stored run that answered none never counts either."""
    import ui

    lab_runs = ui.get_lab().history.runs()
    group = next(g for g in ui.get_lab().history.entries(lab_runs) if len(g) > 1)
    assert [r.extra.repeat.index for r in failures.counted_repeats(group)] == [1, 2]
    alone = next(r for r in lab_runs if r.label == "alone")
    alone.n_failed = alone.n_requests  # answered none: left out as History left it out
    assert failures.counted_repeats([alone]) == [] and repeats.median([alone], "output_throughput") is None
    assert repeats.median(group, lambda r: r.duration) == 2.5 == repeats.of_runs(group, "duration").median


def test_the_line_expands_to_each_repeat():
    at = page()
    at.toggle(key="history_each_repeat").set_value(True).run()
    assert list(at.dataframe[0].value["run"]) == ["repeated · repeat 3 of 3", "repeated · repeat 2 of 3",
                                                  "repeated · repeat 1 of 3", "alone"]


def test_selecting_the_line_selects_every_repeat():
    at = page()
    table = at.dataframe[0]
    at.session_state[table.key] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    assert not at.exception
    assert any(b.label == "Delete 3 selected" for b in at.button)
