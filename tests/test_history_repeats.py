"""The repeats of one load test are one line of History (issue #31 item 3): their medians over the repeats that
answered every request, expandable to each repeat, and selected together. Through app.py with AppTest."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_store import make_run  # noqa: E402
from tests.conftest import free_port  # noqa: E402

APP = str(ROOT / "app.py")


@pytest.fixture(scope="module", autouse=True)
def lab(tmp_path_factory):
    d = tmp_path_factory.mktemp("history-repeats")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVING_LAB_DB", str(d / "history.sqlite"))
        mp.setenv("SERVING_LAB_VLLM_PORT", str(free_port()))
        import ui

        ui.get_lab.clear()
        lab = ui.get_lab()
        for i, tput in enumerate((100.0, 120.0, 0.0)):  # the third repeat failed: its zero is no measurement
            run = make_run(1_764_500_000.0 + i * 10, "repeated")
            run.extra.repeat_group, run.extra.repeat_index, run.extra.repeats = "g1", i + 1, 3
            run.extra.repeat_failed = tput == 0.0
            run.summary.output_throughput = tput
            lab.store.save(run)
        lab.store.save(make_run(1_764_400_000.0, "alone"))
        yield lab
        lab.shutdown()
        ui.get_lab.clear()


def page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/history.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_repeats_are_one_line_with_the_median_of_those_that_answered():
    df = page().dataframe[0].value
    assert list(df["run"]) == ["repeated · 3 of 3 repeats, medians of 2", "alone"]
    assert df["output tok/s"][0] == 110.0 and df["status"][0] == "◐ some failed"


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
