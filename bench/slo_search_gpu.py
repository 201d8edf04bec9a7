"""The SLO search against a fine sweep of the same server: start vLLM, search
for the most requests in flight at which the SLO holds (Runner.slo_search: bisection, a tolerance, a time cap),
then sweep the same server level by level around the answer and judge each level by the same SLO. The two
agree when the sweep's last level that held is within the search's tolerance of the search's answer. Prints
both and writes slo-search.json.

    python3 bench/slo_search_gpu.py --model shape-only --out OUTDIR [--ttft-ms 500] [--tpot-ms 20]
        [--high 512] [--tolerance 16] [--tokens 128]"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import bench_lab, serve  # noqa: E402 - bench/common.py puts the project on the path

from engine.measure.judge.slo import Slo, judge  # noqa: E402
from engine.measure.workloads.defaults import load_test_spec  # noqa: E402
from engine.observe import hardware  # noqa: E402
from engine.runs import Runner, Target  # noqa: E402
from engine.settings import from_env  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="shape-only")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ttft-ms", type=float, default=500)
    ap.add_argument("--tpot-ms", type=float, default=20)
    ap.add_argument("--high", type=int, default=512)
    ap.add_argument("--tolerance", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=9000)
    a = ap.parse_args()
    lab = bench_lab(a.out, a.port)
    if not serve(lab, a.model):
        return 1
    store = lab.store
    slo = Slo(ttft_ms=a.ttft_ms, tpot_ms=a.tpot_ms)
    target = Target.of(lab.server)
    runner = Runner(lambda r: store.save(r) and r, models_dir=from_env().models)
    # Each level sends max(16, 2 × level) requests (loadgen.run_level), each of exactly a.tokens tokens.
    spec = load_test_spec("concurrency", 16, a.tokens, max_len=lab.serving_max_len(), ignore_eos=True,
                          concurrency=1, synthetic=True, warmup=True)
    t0 = time.time()
    search = runner.slo_search(spec, target, slo, low=1, high=a.high, tolerance=a.tolerance, time_cap_s=900)
    search_s = time.time() - t0
    print(f"\nsearch ({search_s:.0f} s): {search.said}", flush=True)
    for level, held, run in search.tried:
        print(f"  {level:4d} in flight: {'holds' if held else 'misses'}  {judge(run, slo).said}")
    best = search.best or 1
    fine = sorted({lv for lv in range(max(1, best - 2 * a.tolerance), min(a.high, best + 3 * a.tolerance) + 1,
                                      max(1, a.tolerance // 2))})
    t0 = time.time()
    runs = runner.sweep(spec, fine, target)
    sweep_s = time.time() - t0
    verdicts = [(lv, judge(r, slo)) for lv, r in zip(fine, runs)]
    print(f"\nfine sweep ({sweep_s:.0f} s), {len(fine)} levels:", flush=True)
    for lv, v in verdicts:
        print(f"  {lv:4d} in flight: {'holds' if v.meets else 'misses'}  attainment {v.attainment:.0%}, "
              f"goodput {v.goodput:.2f} req/s")
    # The sweep's boundary: the last level that held below its first miss (a level that holds again above a miss
    # is the boundary's noise, said, not the answer)
    first_miss = next((lv for lv, v in verdicts if not v.meets), None)
    below = [lv for lv, v in verdicts if v.meets and (first_miss is None or lv < first_miss)]
    sweep_best = max(below) if below else None
    above_miss = [lv for lv, v in verdicts if v.meets and first_miss is not None and lv > first_miss]
    agree = sweep_best is not None and abs(sweep_best - best) <= a.tolerance
    print(f"\nsearch: {search.best}, fine sweep: {sweep_best} (first miss {first_miss}; held again above it: "
          f"{above_miss or 'none'}), tolerance {a.tolerance}: {'agree' if agree else 'DISAGREE'}")
    (a.out / "slo-search.json").write_text(json.dumps({
        "machine": hardware.summary_line(hardware.describe()), "slo_ms": slo.goodput_config(),
        "tokens": a.tokens, "tolerance": a.tolerance, "high": a.high,
        "search": {"best": search.best, "above": search.above, "capped": search.capped, "seconds": search_s,
                   "tried": [{"level": lv, "held": h, "attainment": judge(r, slo).attainment,
                              "output_throughput": r.summary.output_throughput} for lv, h, r in search.tried]},
        "sweep": {"seconds": sweep_s, "levels": [{"level": lv, "held": v.meets, "attainment": v.attainment,
                                                  "goodput": v.goodput} for lv, v in verdicts],
                  "best": sweep_best, "first_miss": first_miss, "held_above_first_miss": above_miss},
        "agree": agree}, indent=1, default=str))
    lab.stop_server()
    lab.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
