"""How often the verdict calls an A/A pair "beyond noise" when each side is ONE run judged by its requests, and the
runs themselves vary from run to run (issue #29 item 2's A/A, reviewed for every comparison path). The verdict's
own A/A test (tests/test_verdict.py) draws requests independently, which is true within a run; two runs of the same
workload also differ as a whole (the machine's state, the server's batches, a neighbour), by a factor common to all
of a run's requests. No test can pin that factor (it is the machine's), so this measures the call rate for a few
plausible ones instead. A simulation, no server: seconds on any machine.

    .venv/bin/python bench/verdict_aa_runs.py [--trials 400] [--out bench/results/verdict-aa-single-runs.md]"""
from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

from common import ROOT  # noqa: E402 - bench/common.py puts the project on the path

from engine.measure.judge import verdict  # noqa: E402

RUN_NOISE = (0.0, 0.03, 0.05, 0.10)  # sigma of a run's common factor on the log scale: 0 %, ~3 %, ~5 %, ~10 %
REQUEST_NOISE = 0.3  # sigma of a request's own TTFT on the log scale (queueing, prompt length)


def unpaired(rng: random.Random, n: int, run_noise: float) -> bool:
    """Two runs of n requests, each run's TTFTs scaled by its own factor: the per-request Welch verdict."""
    fa, fb = (math.exp(rng.gauss(0, run_noise)) for _ in "ab")
    a = [fa * 0.1 * math.exp(rng.gauss(0, REQUEST_NOISE)) for _ in range(n)]
    b = [fb * 0.1 * math.exp(rng.gauss(0, REQUEST_NOISE)) for _ in range(n)]
    return bool(verdict.compare(a, b, per=verdict.REQUESTS).beyond_noise)


def paired(rng: random.Random, n: int, run_noise: float) -> bool:
    """The Naive page's contenders: n prompts of their own lengths on both sides, each side one run (its factor),
    each answer 5 % noise of its own: the paired verdict."""
    fa, fb = (math.exp(rng.gauss(0, run_noise)) for _ in "ab")
    prompts = [math.exp(rng.gauss(0, 0.5)) for _ in range(n)]
    a = [fa * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
    b = [fb * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
    return bool(verdict.compare(a, b, paired=True).beyond_noise)


def guide_speedup(rng: random.Random, n: int, run_noise: float) -> bool:
    """The guided lab's speed-up: naive's one run against vLLM's 3 repeats of the same n prompts, each prompt's vLLM
    time the geometric mean of its repeats (verdict.per_prompt's way), paired."""
    prompts = [math.exp(rng.gauss(0, 0.5)) for _ in range(n)]
    fa = math.exp(rng.gauss(0, run_noise))
    naive = [fa * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
    runs = [[f * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
            for f in (math.exp(rng.gauss(0, run_noise)) for _ in range(3))]
    vllm = [math.exp(sum(math.log(r[i]) for r in runs) / 3) for i in range(n)]
    return bool(verdict.compare(vllm, naive, paired=True).beyond_noise)


def repeats(rng: random.Random, n: int, run_noise: float) -> bool:
    """For contrast: 3 runs a side, each run's summary (its requests' geometric mean): the runs' Welch verdict."""
    def run() -> float:
        f = math.exp(rng.gauss(0, run_noise))
        return math.exp(sum(math.log(f * 0.1) + rng.gauss(0, REQUEST_NOISE) for _ in range(n)) / n)
    return bool(verdict.compare([run() for _ in range(3)], [run() for _ in range(3)]).beyond_noise)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "verdict-aa-single-runs.md")
    args = ap.parse_args()
    cases = [("one run a side, requests compared (History, side by side, --versus, compare)", unpaired, 50),
             ("one run a side, requests compared", unpaired, 10),
             ("one run a side, the same 5 prompts paired (Naive page)", paired, 5),
             ("naive's one run against vLLM's 3 repeats, 5 prompts paired (guided lab step 5)", guide_speedup, 5),
             ("3 runs a side, runs compared (repeats: Tuning, the guided lab, --repeats)", repeats, 50)]
    lines = ["# A/A: how often two runs of the same workload are called \"beyond noise\"", "",
             f"`bench/verdict_aa_runs.py --trials {args.trials}` (a seeded simulation through "
             "`engine.measure.judge.verdict`, no server; the machine does not matter). The stated rate is 5 %. "
             f"A request's own noise: sigma {REQUEST_NOISE} on the log scale; a run's common factor: the columns.", "",
             "| comparison | requests a run | " + " | ".join(f"run-to-run {s:.0%}" for s in RUN_NOISE) + " |",
             "|---|---|" + "---|" * len(RUN_NOISE)]
    for name, fn, n in cases:
        rates = []
        for s in RUN_NOISE:
            rng = random.Random(f"{fn.__name__}-{n}-{s}")
            rates.append(sum(fn(rng, n, s) for _ in range(args.trials)) / args.trials)
        lines.append(f"| {name} | {n} | " + " | ".join(f"{r:.1%}" for r in rates) + " |")
    lines += ["", "Within a run requests are independent enough: with no run-to-run noise every path holds 5 %. Two "
              "single runs differ by their runs' factors too, which their requests' spread does not see, so a "
              "per-request verdict of one run a side calls A/A pairs beyond noise more often the more the runs vary "
              "and the more requests they hold; repeats (3 runs a side, compared as runs) hold the rate at any "
              "run-to-run noise."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
