"""One run a side judged by its requests: two runs of the same workload differ as a whole too
(a busy neighbour, a warm cache), by a factor their requests' spread cannot see. Every path that compares the
requests of single runs (History compare, side by side, --versus, `engine compare`: compare_runs; the Naive page and
the guided lab's speed-up: per_prompt; the lab's concurrency against naive's answers: of_values) adds the
run-to-run allowance, so that A/A pairs of runs whose factor varies up to the allowance are called beyond noise at
most at the stated rate, a real effect is still found, and the sentence names the allowance. Where both sides come
from one run (TTFT per turn, a streamed answer's first token against its end) the run's factor cancels: no
allowance. bench/verdict_aa_runs.py measures the same rates over a wider grid."""
from __future__ import annotations

import math
import random
import time

import pytest

from engine import guide as g
from engine.figures import contenders
from engine.guide.findings import concurrency, speedup, streamed
from engine.measure.judge import stats, verdict
from engine.results.records import RequestRecord, RunResult
from tests.said import said, values

TRIALS = 600
# The most "beyond noise" calls of TRIALS A/A pairs that a 5 % rate allows: its binomial 99th percentile
# (scipy.stats.binom.ppf(0.99, 600, 0.05) = 42, 7 %). Each case is seeded: the count is the same every run.
AA_MAX = 42
SIGMA = verdict.BETWEEN_RUNS  # the stated allowance, on the log scale


def _run(label: str, ttft: list[float], e2e: list[float] | None = None, kind: str = "vllm") -> RunResult:
    e2e = e2e or [t * 10 for t in ttft]
    recs = [RequestRecord(index=i, prompt="p", send_time=0.0, first_token_time=t, end_time=e, chunk_times=[t, e],
                          output_tokens=20) for i, (t, e) in enumerate(zip(ttft, e2e))]
    return RunResult(kind=kind, scenario="s", label=label, records=recs, duration=max(e2e), started_at=time.time(),
                     summary=stats.summarize(recs, max(e2e)))


def _factor(rng: random.Random, run_noise: float) -> float:
    return math.exp(rng.gauss(0, run_noise))


def one_run_a_side(rng: random.Random, run_noise: float, effect: float = 1.0, n: int = 50) -> verdict.Verdict:
    """History compare, side by side, --versus, `engine compare`: one run a side, a typical request's TTFT."""
    def run(label, scale):
        f = _factor(rng, run_noise) * scale
        return _run(label, [f * 0.1 * math.exp(rng.gauss(0, 0.3)) for _ in range(n)])
    return verdict.compare_runs([run("A", 1.0)], [run("B", effect)], "mean_ttft_ms", name="Mean TTFT",
                                label_a="A", label_b="B")


def naive_page(rng: random.Random, run_noise: float, effect: float = 1.0) -> verdict.Verdict:
    """The Naive page: the same 5 prompts through naive and vLLM, one run each, paired (contenders.speedup)."""
    prompts = [math.exp(rng.gauss(0, 0.5)) for _ in range(5)]

    def run(label, scale, kind):
        f = _factor(rng, run_noise) * scale
        return _run(label, [0.01] * 5, [f * p * math.exp(rng.gauss(0, 0.05)) for p in prompts], kind=kind)
    return contenders.speedup(run("naive", effect, "naive"), run("vLLM", 1.0, "vllm"))


def guide_speedup(rng: random.Random, run_noise: float, effect: float = 1.0) -> verdict.Verdict:
    """The guided lab's step 5: naive's one run against vLLM's 3 repeats of the same 5 prompts, paired."""
    prompts = [math.exp(rng.gauss(0, 0.5)) for _ in range(5)]

    def run(scale, kind):
        f = _factor(rng, run_noise) * scale
        return _run(kind, [0.01] * 5, [f * p * math.exp(rng.gauss(0, 0.05)) for p in prompts], kind=kind)
    return speedup(run(effect, "naive"), [run(1.0, "vllm") for _ in range(3)])["verdict"]


PATHS = {"one run a side, 50 requests": one_run_a_side, "Naive page, 5 prompts paired": naive_page,
         "guided lab step 5, 1 against 3 runs": guide_speedup}


@pytest.mark.parametrize("run_noise", [0.0, SIGMA / 2, SIGMA], ids=["none", "half", "the allowance"])
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_aa_runs_that_vary_up_to_the_allowance_are_called_beyond_noise_at_most_at_the_stated_rate(path, run_noise):
    rng = random.Random(f"aa-{path.__name__}-{run_noise}")
    calls = sum(bool(path(rng, run_noise).beyond_noise) for _ in range(TRIALS))
    assert calls <= AA_MAX, f"{calls / TRIALS:.1%} of A/A pairs called beyond noise"


@pytest.mark.parametrize("effect,least", [(2.0, 0.95), (1.5, 0.6)])
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_a_known_effect_between_runs_at_the_allowances_noise_is_still_found(path, effect, least):
    rng = random.Random(f"ab-{path.__name__}-{effect}")
    found = 0
    for _ in range(200):
        v = path(rng, SIGMA, effect)
        found += bool(v.beyond_noise and v.ratio > 1)
    assert found / 200 >= least


def test_one_run_a_side_names_the_allowance_in_its_sentence():
    v = one_run_a_side(random.Random(1), 0.0, effect=2.0)
    assert v.per == verdict.REQUESTS and v.allowance == pytest.approx(SIGMA) and v.beyond_noise
    assert said(v.how.values["between"]).template == ("one run a side: its requests' spread plus ±{pct} % allowed "
                                                      "between runs")
    assert values(v.said)["how"]["between"] == {"pct": "10"}  # a run 10 % faster or slower, one SD


def test_the_allowance_widens_the_interval_it_states():
    """The same requests compared as one run a side and as samples of no run (verdict.compare without `runs`): the
    first interval holds the second, wider by the allowance."""
    rng = random.Random(2)
    a = [0.1 * math.exp(rng.gauss(0, 0.3)) for _ in range(50)]
    b = [0.1 * math.exp(rng.gauss(0, 0.3)) for _ in range(50)]
    bare = verdict.compare(a, b, per=verdict.REQUESTS)
    runs = verdict.compare(a, b, per=verdict.REQUESTS, runs=(1, 1))
    assert bare.allowance is None and "between" not in bare.how.values
    assert runs.low < bare.low < bare.high < runs.high
    spread = math.log(bare.high / bare.low) / 2, math.log(runs.high / runs.low) / 2
    # half-widths on the log scale: the allowance adds sigma^2 * (1 + 1) under the root
    assert spread[1] ** 2 - spread[0] ** 2 == pytest.approx(1.96 ** 2 * 2 * SIGMA ** 2, rel=0.15)


def test_repeats_measure_the_allowance_where_they_vary_more_than_the_default():
    """vLLM's 3 repeats whose runs differ by ~30 %: the allowance is their own spread, and the sentence says so."""
    prompts = [1.0, 1.5, 0.8, 2.0, 1.2]
    seq = [_run("vLLM", [0.01] * 5, [f * p for p in prompts]) for f in (0.7, 1.0, 1.35)]
    naive = _run("naive", [0.01] * 5, [1.6 * p for p in prompts], kind="naive")
    v = speedup(naive, seq)["verdict"]
    measured = verdict.spread_of_runs([[math.log(f * p) for p in prompts] for f in (0.7, 1.0, 1.35)])
    assert measured > SIGMA and v.allowance == pytest.approx(measured)
    assert said(v.how.values["between"]).template == ("the requests' spread plus ±{pct} % between runs, as the "
                                                      "repeats measured")
    # 1.6x from one naive run against runs 30 % apart: not beyond noise
    assert v.beyond_noise is False


def test_the_guide_concurrency_against_naives_answers_carries_the_allowance_for_naives_one_run():
    naive = _run("naive", [0.1] * 5, [2.0, 2.1, 1.9, 2.0, 2.0], kind="naive")
    conc = [_run("10 at once", [0.1] * 10, [1.5 * f] * 10) for f in (1.0, 1.05, 0.95)]
    v = concurrency(conc, naive)["verdict"]
    assert v.allowance is not None and v.allowance >= SIGMA
    f = g.findings({"naive": [naive], "concurrent": conc})[2]
    assert "between" in str(values(f.text)) or "allowed between runs" in str(f.text)


def test_where_both_sides_come_from_one_run_there_is_no_allowance():
    """TTFT per turn (turn 1 against turn N of one run) and a streamed answer's first token against its end: the
    run's own factor is on both sides and cancels."""
    from engine.figures import workloads as fw
    from tests.test_workloads import caption_said

    recs = [RequestRecord(index=c * 2 + t, prompt="q", send_time=0.0, first_token_time=0.1 * (t + 1) + 0.001 * c,
                          end_time=1.0, chunk_times=[0.1 * (t + 1)], prompt_tokens=10 + 90 * t, conversation=c, turn=t)
             for c in range(6) for t in range(2)]
    run = RunResult(kind="vllm", scenario="multi-turn", label="x", records=recs, duration=1, started_at=time.time())
    v = said(caption_said(fw.ttft_by_turn(run))[0])
    assert "between" not in values(v)["how"]
    stream = [_run("stream", [0.05], [4.0]) for _ in range(3)]
    assert streamed(stream)["verdict"].allowance is None
    conc = [_run("10 at once", [0.1] * 10, [1.5 * f] * 10) for f in (1.0, 1.05, 0.95)]
    assert concurrency(conc, None)["verdict"].allowance is None  # wall against serial of the same runs


def test_repeats_compared_as_runs_carry_no_allowance():
    """Their runs' spread already holds the run-to-run noise."""
    v = verdict.compare([100.0, 104.0, 98.0], [120.0, 118.0, 123.0])
    assert v.allowance is None and "between" not in v.how.values
