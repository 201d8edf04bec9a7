"""How often the verdict calls an A/A pair "beyond noise" when each side is ONE run judged by its requests, and the
runs themselves vary from run to run (an A/A check of every comparison path). The verdict's
own A/A test (tests/test_verdict.py) draws requests independently, which is true within a run; two runs of the same
workload also differ as a whole (the machine's state, the server's batches, a neighbour), by a factor common to all
of a run's requests. No test can pin that factor (it is the machine's), so this measures the call rate for a few
plausible ones instead, before (the requests' spread alone, as the verdict judged before the run-to-run allowance) and
after (the run-to-run allowance each path now adds: verdict.compare's `runs`, sigma never below
verdict.BETWEEN_RUNS, measured from repeats where a side has them). A simulation, no server: the machine does not
matter; seconds on any machine.

    .venv/bin/python bench/verdict_aa_runs.py [--trials 400] [--out bench/results/verdict-aa-single-runs.md]"""
from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

from common import ROOT  # noqa: E402 - bench/common.py puts the project on the path

from engine.measure.judge import verdict  # noqa: E402

# sigma of a run's factor on the log scale: 0 %, ~3 %, ~5 %, the allowance (a run 10 % faster or slower), ~15 %
RUN_NOISE = (0.0, 0.03, 0.05, verdict.BETWEEN_RUNS, 0.15)
REQUEST_NOISE = 0.3  # sigma of a request's own TTFT on the log scale (queueing, prompt length)


def unpaired(rng: random.Random, n: int, run_noise: float, after: bool, effect: float = 1.0) -> bool:
    """Two runs of n requests, each run's TTFTs scaled by its own factor: the per-request Welch verdict
    (verdict.compare_runs' one-run-a-side path)."""
    fa, fb = (math.exp(rng.gauss(0, run_noise)) for _ in "ab")
    a = [fa * 0.1 * math.exp(rng.gauss(0, REQUEST_NOISE)) for _ in range(n)]
    b = [effect * fb * 0.1 * math.exp(rng.gauss(0, REQUEST_NOISE)) for _ in range(n)]
    return bool(verdict.compare(a, b, per=verdict.REQUESTS, runs=(1, 1) if after else None).beyond_noise)


def paired(rng: random.Random, n: int, run_noise: float, after: bool, effect: float = 1.0) -> bool:
    """The Naive page's contenders: n prompts of their own lengths on both sides, each side one run (its factor),
    each answer 5 % noise of its own: the paired verdict (verdict.per_prompt of one run a side)."""
    fa, fb = (math.exp(rng.gauss(0, run_noise)) for _ in "ab")
    prompts = [math.exp(rng.gauss(0, 0.5)) for _ in range(n)]
    a = [fa * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
    b = [effect * fb * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
    return bool(verdict.compare(a, b, paired=True, runs=(1, 1) if after else None).beyond_noise)


def guide_speedup(rng: random.Random, n: int, run_noise: float, after: bool, effect: float = 1.0) -> bool:
    """The guided lab's speed-up: naive's one run against vLLM's 3 repeats of the same n prompts, each prompt's vLLM
    time the geometric mean of its repeats, paired; after, with sigma measured from the repeats as
    verdict.per_prompt does (never below the default)."""
    prompts = [math.exp(rng.gauss(0, 0.5)) for _ in range(n)]
    fa = math.exp(rng.gauss(0, run_noise))
    naive = [effect * fa * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
    runs = [[f * p * math.exp(rng.gauss(0, 0.05)) for p in prompts]
            for f in (math.exp(rng.gauss(0, run_noise)) for _ in range(3))]
    vllm = [math.exp(sum(math.log(r[i]) for r in runs) / 3) for i in range(n)]
    spread = verdict.spread_of_runs([[math.log(x) for x in r] for r in runs])
    return bool(verdict.compare(vllm, naive, paired=True, runs=(3, 1) if after else None,
                                spread=spread).beyond_noise)


def repeats(rng: random.Random, n: int, run_noise: float, after: bool) -> bool:
    """For contrast: 3 runs a side, each run's summary (its requests' geometric mean): the runs' Welch verdict, the
    same before and after (their spread holds the run-to-run noise)."""
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
             f"`bench/verdict_aa_runs.py --trials {args.trials}`: a seeded simulation through "
             "`engine.measure.judge.verdict`, no server, so the machine does not matter (any machine gives these "
             "counts). The stated rate is 5 %. A request's own noise: sigma "
             f"{REQUEST_NOISE} on the log scale; a run's common factor: the columns (its sigma on the log scale). "
             "Each cell: before (the requests' spread alone, as the verdict once judged) → after (plus "
             f"the run-to-run allowance, sigma {verdict.BETWEEN_RUNS:.4f} (log 1.1: a run 10 % faster or slower) "
             "unless the repeats measure more; "
             "docs/measuring.md#between-runs). Each cell's two rates come from the same seeded pairs.", "",
             "| comparison | requests a run | " + " | ".join(
                 f"run-to-run {math.expm1(s):.0%}" + (" (the allowance)" if s == verdict.BETWEEN_RUNS else "")
                 for s in RUN_NOISE) + " |",
             "|---|---|" + "---|" * len(RUN_NOISE)]
    for name, fn, n in cases:
        cells = []
        for s in RUN_NOISE:
            rates = []
            for after in (False, True):
                rng = random.Random(f"{fn.__name__}-{n}-{s}")
                rates.append(sum(fn(rng, n, s, after) for _ in range(args.trials)) / args.trials)
            cells.append(f"{rates[0]:.1%} → {rates[1]:.1%}")
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    effects = (1.5, 2.0)
    lines += ["", f"A real effect still found (called beyond noise, the right way), {args.trials} seeded pairs at "
              f"run-to-run {math.expm1(verdict.BETWEEN_RUNS):.0%} (the allowance), before → after:", "",
              "| comparison | requests a run | " + " | ".join(f"B {e:g}× A" for e in effects) + " |",
              "|---|---|" + "---|" * len(effects)]
    for name, fn, n in cases[:-1]:
        cells = []
        for e in effects:
            rates = []
            for after in (False, True):
                rng = random.Random(f"ab-{fn.__name__}-{n}-{e}")
                rates.append(sum(fn(rng, n, verdict.BETWEEN_RUNS, after, e) for _ in range(args.trials)) / args.trials)
            cells.append(f"{rates[0]:.1%} → {rates[1]:.1%}")
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    lines += ["", "Within a run requests are independent enough: with no run-to-run noise every path held 5 % "
              "before. Two single runs differ by their runs' factors too, which their requests' spread does not "
              "see, so before, a per-request verdict of one run a side called A/A pairs beyond noise more often the "
              "more the runs varied and the more requests they held. After, each path adds the run-to-run variance "
              "its requests cannot see (sigma² / k for a side of k runs), so it holds the stated rate at any "
              f"run-to-run noise up to the allowance ({math.expm1(verdict.BETWEEN_RUNS):.0%}) and is conservative "
              "below it; "
              "beyond the allowance the rate climbs again, slower, unless a side's repeats measure the spread "
              "(the guided lab's step 5). Repeats compared as runs hold the rate at any run-to-run noise, before "
              "and after: the way to a sharper verdict is to repeat each side."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
