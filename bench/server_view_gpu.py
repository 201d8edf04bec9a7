"""The server's view of a run, measured by the product's own code without Streamlit: start vLLM,
then at each level of requests in flight one warmed-up load test through the Lab, and print what the server
said about it (queue / prefill / decode against the client's TTFT and E2E, tokens per engine step) and, on an
NVIDIA GPU, the energy it used. Writes server-view.json (the runs' summaries, server views and energy).

    python3 bench/server_view_gpu.py --model shape-only --out OUTDIR [--levels 1,10,64,256] [--tokens 128]"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from common import bench_lab, level_run, serve  # noqa: E402 - bench/common.py puts the project on the path

from engine.measure.judge import server_time  # noqa: E402
from engine.observe import energy  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="shape-only")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--levels", default="1,10,64,256")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=9000)
    a = ap.parse_args()
    lab = bench_lab(a.out, a.port)
    if not serve(lab, a.model):
        return 1
    out = []
    for level in [int(x) for x in a.levels.split(",")]:
        if (run := level_run(lab, level, a.tokens, synthetic=level != 10)) is None:  # the lab's 10 prompts at 10
            continue
        n, s = len(run.measured), run.summary
        print(f"\n== {level} in flight, {n} requests × {a.tokens} tokens: {run.duration:.2f} s, "
              f"{s.output_throughput:,.0f} tok/s, TTFT median {s.latency_ms.get('median_ttft_ms') or 0:.0f} ms",
              flush=True)
        for line in server_time.said(run):
            print("  ", line)
        if b := server_time.batch_said(run):
            print("  ", b)
        use = energy.use(run.extra.energy.reading, s.total_output_tokens)
        for line in (energy.said(use) if use else [energy.missing_said(run.extra.energy.missing or "no-meter")]):
            print("  ", line)
        out.append({"level": level, "requests": n, "tokens": a.tokens, "duration_s": run.duration,
                    "summary": s.to_dict(), "server_view": (v := run.extra.server_view) and v.to_dict(),
                    "energy": (e := run.extra.energy.reading) and e.to_dict(),
                    "energy_use": dataclasses.asdict(use) if use else None,
                    "server_time": dataclasses.asdict(st) if (st := server_time.of(run)) else None})
    (a.out / "server-view.json").write_text(json.dumps(out, indent=1, default=str))
    lab.stop_server()
    lab.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
