"""The guided lab's findings decided by the one verdict rule every page follows (engine.measure.judge.verdict):
each comparing finding carries the Verdict its heading follows (its `finding`, its `disturbed`), a
fact is one number on the step, the summary and the report, and A/A pairs of the steps' repeats are called a
difference at most at the stated rate while a known effect is found."""
from __future__ import annotations

import math
import random

import pytest

from engine import guide as g
from engine.digits import change as pct
from engine.digits import significant
from engine.figures import tuning_compare
from engine.figures.theme import caption
from engine.messages import translate
from engine.results.records import Disturbance, Notes, Repeat
from tests.guide_runs import _run
from tests.said import tree, values, within

BUSY = Disturbance(seconds=10.0, cores=2, others_cores=1.4, steal_cores=0.0)
GPU_BUSY = Disturbance(gpus=[0], gpu_others=1, gpu_others_gb=5.0, gpu_others_busy=40.0)
CPU = {"device": "cpu", "cpu_kvcache_gib": 2}


def _repeats(scenario: str, secs: list[float], tokens: int, n: int, *, label: str, at_once: bool = True,
             kind: str = "vllm") -> list:
    """One run per value of `secs` (each of its `n` requests taking that long), the same label: a step's repeats."""
    return [_run(scenario, kind, [(s, tokens)] * n, tokens, at_once=at_once, label=label, config=CPU,
                 extra=Notes(repeat=Repeat(group=f"g-{label}", index=i + 1, total=len(secs))))
            for i, s in enumerate(secs)]


def _naive(secs: list[float]):
    return _run("naive-5", "naive", [(s, 50) for s in secs], 50, config=CPU)


def _sequential(per_prompt: list[list[float]]):
    """vLLM's repeats of the 5 prompts one at a time: per_prompt[repeat][prompt] seconds."""
    return [_run("vllm-5-sequential", "vllm", [(s, 50) for s in rep], 50, label="vLLM, one at a time", config=CPU)
            for rep in per_prompt]


def _tuning(a: list[float], b: list[float]) -> list:
    return (_repeats("tuning", a, 20, 10, label="max-model-len 2048 / KV 2 GiB")
            + _repeats("tuning", b, 20, 10, label="max-model-len 512 / KV 2 GiB"))


def _all(disturb=None, where: str = "") -> dict[str, list]:
    """Every step's runs with a clear difference in each comparison; `disturb` put on one run of step `where`."""
    runs = {"naive": [_naive([2.0, 2.1, 1.9, 2.0, 2.0])],
            "sequential": _sequential([[0.5, 0.52, 0.48, 0.5, 0.51], [0.52, 0.5, 0.49, 0.51, 0.5],
                                       [0.49, 0.51, 0.5, 0.5, 0.52]]),
            "concurrent": _repeats("concurrent-10", [1.5, 1.6, 1.4], 25, 10, label="10 at once"),
            "tuning": _tuning([2.0, 2.05, 1.95], [1.6, 1.62, 1.58]),
            "streaming": _repeats("stream-300", [4.0, 4.1, 3.9], 300, 1, label="stream", at_once=False)}
    if disturb is not None:
        runs[where][-1].extra.beside.disturbance = disturb
    return runs


COMPARING = (1, 2, 3, 4)  # the speed-up, concurrency, tuning and streaming findings: each a comparison


def _follows_its_verdict(f: g.Finding) -> None:
    v = f.verdict
    assert v is not None, f"finding {f.number} has no verdict for its heading to follow"
    if v.disturbed is not None:
        assert (f.title, f.claim) == (g.BUSY, None)
    elif v.finding is None:
        assert (f.title, f.claim) == (g.UNDECIDED, None)
    elif v.finding is False:
        assert (f.title, f.claim) == (g.NO_DIFFERENCE, 0)
    else:
        assert f.claim in (1, -1) and f.title not in (g.BUSY, g.UNDECIDED, g.NO_DIFFERENCE)


@pytest.mark.parametrize("disturb,where", [(None, ""), (BUSY, "sequential"), (BUSY, "naive"), (BUSY, "concurrent"),
                                           (BUSY, "tuning"), (BUSY, "streaming"), (GPU_BUSY, "tuning")],
                         ids=["quiet", "sequential", "naive", "concurrent", "tuning", "streaming", "gpu"])
def test_each_comparing_finding_is_headed_by_its_verdicts_finding(disturb, where):
    found = g.findings(_all(disturb, where))
    for i in COMPARING:
        _follows_its_verdict(found[i])
    hit = {"naive": (1, 2), "sequential": (1,), "concurrent": (2,), "tuning": (3,), "streaming": (4,)}.get(where, ())
    for i in COMPARING:
        # a disturbed run withholds exactly the findings it is part of: the verdict says which side, the heading follows
        assert (found[i].verdict.disturbed is not None) == (i in hit), (where, i)
        assert (found[i].title == g.BUSY) == (i in hit)
    if disturb is None:
        assert [found[i].claim for i in COMPARING] == [1, 1, 1, 1]


def test_within_noise_heads_every_comparing_finding_no_measurable_difference():
    """A/A data in each step: the speed-up of vLLM against a naive run of the same speed, the tuning of two identical
    settings: headed "No measurable difference on this machine", in Korean too, and the text claims nothing."""
    rng = random.Random(7)
    base = [2.0, 1.6, 2.4, 1.9, 2.2]
    naive = _naive([b * math.exp(rng.gauss(0, 0.1)) for b in base])
    seq = _sequential([[b * math.exp(rng.gauss(0, 0.1)) for b in base] for _ in range(3)])
    tuned = _tuning([2.0, 2.3, 1.8], [2.1, 1.85, 2.25])
    found = g.findings({"naive": [naive], "sequential": seq, "tuning": tuned})
    for i in (1, 3):
        assert found[i].verdict.finding is False
        assert found[i].title == g.NO_DIFFERENCE and found[i].claim == 0
        assert translate(found[i].title, "ko") == "이 머신에서는 측정 가능한 차이가 없습니다"
    assert tree(found[1].text)["id"] == (  # the sentence of no difference: it claims no speed-up
        "{mean} s per request through vLLM against naive's {naive} s, with the same prompts and token budget: {x}×, "
        "within this machine's noise ({interval}, which holds no change; {how}).")


def test_the_tuning_change_is_one_number_on_the_step_the_summary_and_the_report(tmp_path):
    """Repeats whose mean and geometric mean differ (one slow repeat): the finding's sentence, the step's table of
    numbers and the step's chart caption state the same change, the one the verdict judged; the report's summary
    is the finding's own sentence."""
    tuned = _tuning([2.0, 2.0, 5.0], [1.6, 1.62, 1.58])  # 100, 100, 40 tok/s against ~125 tok/s
    found = g.findings({"tuning": tuned})[3]
    v, said = found.verdict, values(found.text)
    assert said["change"] == f"{pct(v.ratio)} %"  # "+70 %": the verdict's ratio of the repeats' centres
    assert (said["a"], said["b"]) == (significant(v.center_a), significant(v.center_b))  # the levels it is of
    rows = g.numbers("tuning", {"tuning": tuned}, {})
    # the table beside the notebook's: the second setting's throughput and the change
    assert str(rows[1].here) == f"{said['b']} tok/s" and str(rows[2].here) == said["change"]
    change = said["change"]
    cap = caption(tuning_compare(tuned))
    assert f"({change})" in cap, cap  # the chart on the same step: "1.70× (+70 %), beyond noise"


TRIALS = 300
# The most "beyond noise" calls of TRIALS A/A pairs that a 5 % rate allows: its binomial 99.9th percentile
# (scipy.stats.binom.ppf(0.999, 300, 0.05) = 28, 9.3 %). Seeded: the count is the same every run.
AA_MAX = 28


def test_aa_tuning_repeats_are_called_a_difference_at_most_at_the_stated_rate():
    """Two identical settings, 3 repeats each, throughput noise multiplicative (a shared machine): the tuning
    finding claims a difference (either way) at most at the stated rate."""
    rng = random.Random("aa-tuning")
    calls = 0
    for _ in range(TRIALS):
        secs = [2.0 * math.exp(rng.gauss(0, 0.15)) for _ in range(6)]
        calls += g.findings({"tuning": _tuning(secs[:3], secs[3:])})[3].claim not in (0, None)
    assert calls <= AA_MAX


def test_aa_speedup_against_a_naive_run_of_the_same_speed_holds_the_rate():
    """Naive and vLLM at the same speed on 5 prompts of their own lengths, vLLM repeated 3 times: the speed-up
    finding claims one (either way) at most at the stated rate."""
    rng = random.Random("aa-speedup")
    calls = 0
    for _ in range(TRIALS):
        base = [math.exp(rng.gauss(0.7, 0.3)) for _ in range(5)]
        naive = _naive([b * math.exp(rng.gauss(0, 0.1)) for b in base])
        seq = _sequential([[b * math.exp(rng.gauss(0, 0.1)) for b in base] for _ in range(3)])
        calls += g.findings({"naive": [naive], "sequential": seq})[1].claim not in (0, None)
    assert calls <= AA_MAX


def test_a_known_effect_is_found_by_the_tuning_and_speedup_findings():
    rng = random.Random("ab-findings")
    tuning = speed = 0
    for _ in range(100):
        secs = [2.0 * math.exp(rng.gauss(0, 0.08)) for _ in range(6)]
        tuning += g.findings({"tuning": _tuning(secs[:3], [s / 1.5 for s in secs[3:]])})[3].claim == 1
        base = [math.exp(rng.gauss(0.7, 0.3)) for _ in range(5)]
        naive = _naive([1.5 * b * math.exp(rng.gauss(0, 0.1)) for b in base])
        seq = _sequential([[b * math.exp(rng.gauss(0, 0.1)) for b in base] for _ in range(3)])
        speed += g.findings({"naive": [naive], "sequential": seq})[1].claim == 1
    assert tuning >= 90 and speed >= 90


def test_a_gpu_disturbed_step_says_the_other_process_next_to_its_numbers():
    found = g.findings(_all(GPU_BUSY, "tuning"))[3]
    assert found.title == g.BUSY
    assert within(found.text, "{n} other process on the GPU held {gb} GB and used {share} of its compute time") == [
        {"id": "{n} other process on the GPU held {gb} GB and used {share} of its compute time", "n": 1, "gb": "5.0",
         "share": "40 %"}], tree(found.text)
