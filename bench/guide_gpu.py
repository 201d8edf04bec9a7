"""The guided lab, step by step as the presenter's buttons run it, headless (no Streamlit): on a GPU box
this is the seed's own setting — naive generate() holds the GPU first, its worker exits and returns the
memory, then vLLM starts with the notebook's flags. Prints each step's numbers beside the notebook's, then
the six findings, and writes the History export of the runs.

    python3 bench/guide_gpu.py --model shape-only --out OUTDIR [--scale 1.0]"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import bench_lab, wait_ready  # noqa: E402 - bench/common.py puts the project on the path

from engine.serving import models  # noqa: E402
from engine.settings import from_env  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="shape-only")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--port", type=int, default=9000)
    a = ap.parse_args()
    lab = bench_lab(a.out, a.port)
    g = lab.guide
    g.set_model(models.pick(a.model, from_env().models).path)
    g.set_scale(a.scale)
    t_all = time.time()
    for s in g.steps:
        t0 = time.time()
        g.go_to(s.id)
        if s.id == "summary":
            break
        job = g.run_step(s.id)
        if s.id == "start":
            if not wait_ready(lab, t0):
                return 1
        elif job is not None and hasattr(job, "active"):
            while job.active:
                time.sleep(0.5)
            if job.error:
                print(f"step {s.id} failed: {job.error}")
        state = g.state()
        print(f"\n== step {s.number} {s.title} ({time.time() - t0:.1f} s)", flush=True)
        for row in g.numbers(s.id, state):
            print(f"  {row.label}: notebook {row.seed} | here {row.here}")
        if s.id == "free":
            print("  facts:", state.facts.get("free"))
        if s.id == "start":
            print("  facts:", state.facts.get("start"), "KV tokens", lab.server_snapshot().kv_cache_tokens)
    print(f"\n== findings (all steps {time.time() - t_all:.0f} s)")
    for f in g.findings():
        print(f"  {f.number}. {f.title}: {f.text}")
    (a.out / "guide-report.html").write_text(g.report_html("en"))
    (a.out / "runs.json").write_text(lab.store.export_json([r.id for sid in g.state().runs for r in g.runs(sid)]))
    lab.stop_server()
    lab.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
