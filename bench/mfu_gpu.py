"""What --enable-mfu-metrics costs and says, by the product's own code without Streamlit: the
shape-only Llama 3 8B served with the flag, without it, and with it again (interleaved, so drift hits both), at each
level one warmed-up load test through the Lab; per run its throughput, TTFT and, with the flag, vLLM's estimated
TFLOP/s, MFU and bytes read (judge/utilization). Then the cost of the server view's reading: one /metrics read and
its parse (histograms and engine counters), timed on the last run's own pages. Writes mfu.json.

    python3 bench/mfu_gpu.py --out OUTDIR [--levels 1,64,256] [--tokens 128]"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import bench_lab, level_run, wait_ready  # noqa: E402 - bench/common.py puts the project on the path

from engine.measure.judge import utilization  # noqa: E402
from engine.messages import translate  # noqa: E402
from engine.observe import engine_counters, histograms  # noqa: E402
from engine.observe.telemetry import read_metrics_text  # noqa: E402
from engine.serving import models  # noqa: E402
from engine.settings import from_env  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--levels", default="1,64,256")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--model", default="shape-only", help="a catalogue name (embedded: a dry run on the CPU build)")
    a = ap.parse_args()
    lab = bench_lab(a.out, a.port)
    spec_model = models.pick(a.model, from_env().models)
    base = lab.default_config(spec_model).with_changes(max_model_len=2048)
    if base.device == "cuda":
        base = base.with_changes(gpu_memory_utilization=0.85)
    out: list[dict] = []
    for flag in ("on", "off", "on"):
        cfg = base if flag == "on" else base.with_changes(extra_args=("--no-enable-mfu-metrics",))
        t0 = time.time()
        if lab.ready():
            lab.restart_server(cfg, spec_model)
        else:
            lab.start_server(cfg, spec_model)
        time.sleep(2)
        if not wait_ready(lab, t0):
            return 1
        for level in [int(x) for x in a.levels.split(",")]:
            if (run := level_run(lab, level, a.tokens)) is None:
                continue
            n, s = len(run.measured), run.summary
            u = utilization.of(run)
            said = utilization.said(run)
            print(f"mfu {flag} · {level} in flight: {s.output_throughput:,.0f} tok/s, mean TTFT "
                  f"{s.get('mean_ttft_ms') or 0:.1f} ms, mean TPOT {s.get('mean_tpot_ms') or 0:.2f} ms"
                  + (f"\n   {translate(said, 'en')}" if said else ""), flush=True)
            out.append({"mfu_flag": flag, "level": level, "requests": n, "tokens": a.tokens, "duration_s": run.duration,
                        "output_throughput": s.output_throughput, "mean_ttft_ms": s.get("mean_ttft_ms"),
                        "mean_tpot_ms": s.get("mean_tpot_ms"),
                        "estimated": (v := run.extra.server_view) and v.estimated and v.estimated.to_dict(),
                        "tflop_s": u.tflop_s if u else None, "mfu": u.mfu if u else None,
                        "read_gb_s": u.read_gb_s if u else None})
    # the reading's cost: the page as the server view reads it after a run, and its parse
    url = f"http://127.0.0.1:{a.port}"
    reads, parses = [], []
    before = read_metrics_text(url)
    for _ in range(20):
        t = time.perf_counter()
        page = read_metrics_text(url)
        reads.append(time.perf_counter() - t)
        t = time.perf_counter()
        histograms.view(before, page, None, None)
        engine_counters.view(before, page, None)
        parses.append(time.perf_counter() - t)
    cost = {"page_bytes": len(page or ""), "read_ms_median": 1000 * statistics.median(reads),
            "parse_ms_median": 1000 * statistics.median(parses)}
    print(f"reading /metrics: {cost['page_bytes']:,} bytes, read {cost['read_ms_median']:.1f} ms, parse "
          f"{cost['parse_ms_median']:.1f} ms (medians of 20)", flush=True)
    (a.out / "mfu.json").write_text(json.dumps({"runs": out, "metrics_cost": cost}, indent=1, default=str))
    lab.stop_server()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
