"""The sweep's knee and its caption from one finding (the chart marked "knee: 16 in flight"
while the caption under it said the knee was not reached and to sweep higher)."""
from __future__ import annotations

from engine import figures
from engine.measure.judge import slo
from tests.said import read
from tests.test_figures import make_slo_sweep


def _marks(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def test_a_sweep_whose_top_level_met_the_slo_marks_no_knee():
    runs = make_slo_sweep()[:5]  # 1 … 16 in flight: every level met the default SLO
    fig = figures.pareto_chart(runs)
    cap = figures.caption(fig)
    assert "sweep higher" in cap
    assert not any(m.startswith("knee") for m in _marks(fig))  # the caption says there is none
    assert [read("{users:g} in flight still met the SLO: the knee lies higher", m) for m in _marks(fig)] == [
        {"users": "16"}]
    assert "knee" not in [t.name for t in fig.data]  # nor in the legend
    found = slo.find_knee(slo.levels(runs, slo.DEFAULT_SLO), slo.DEFAULT_SLO)
    assert (found.level.users, found.reached) == (16, False) and str(found.said) in cap


def test_a_reached_knee_is_marked_and_said_the_same():
    runs = make_slo_sweep()  # 64 in flight missed it
    fig = figures.pareto_chart(runs)
    found = slo.find_knee(slo.levels(runs, slo.DEFAULT_SLO), slo.DEFAULT_SLO)
    assert found.reached and found.level.users == 32
    assert _marks(fig) == [str(found.mark)] == ["knee: 32 in flight"]
    assert str(found.said) in figures.caption(fig) and "The knee is 32" in str(found.said)
    # Korean: the mark and the caption are both said, never the English left in
    ko = figures.pareto_chart(runs, lang="ko")
    assert _marks(ko) and _marks(ko) != _marks(fig)


def test_no_level_met_it_marks_nothing():
    runs = make_slo_sweep()[-1:]  # 64 in flight alone, which missed it
    fig = figures.pareto_chart(runs)
    assert _marks(fig) == [] and figures.caption(fig).count("No level met the SLO") == 1
