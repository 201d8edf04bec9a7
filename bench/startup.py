"""Server start -> ready on the embedded model, stage by stage, as the engine sees it.

    .venv/bin/python bench/startup.py [--runs 1] [--out bench/results/startup-cpu.md]

Reports how long start() takes to return (what the Start button waits for), when the app first shows
a stage read from vLLM's log, and when weights, KV cache and readiness arrive."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.observe import hardware
from engine.serving import models  # noqa: E402
from engine.serving.config import ServerConfig  # noqa: E402
from engine.serving.server import VLLMServer  # noqa: E402
from engine.settings import from_env  # noqa: E402


def one_run(port: int) -> dict[str, float]:
    spec = models.embedded(from_env().models)
    srv = VLLMServer(from_env(), port=port, poll_s=0.1)
    cfg = ServerConfig(model=spec.path, port=port, cpu_kvcache_gib=1)
    t0 = time.perf_counter()
    srv.start(cfg)
    marks = {"start() returned": time.perf_counter() - t0}
    seen = set()
    while True:
        s = srv.snapshot()
        if s.stage not in seen:
            seen.add(s.stage)
            marks.setdefault(f"stage: {s.stage}", time.perf_counter() - t0)
        if s.state in ("ready", "failed"):
            break
        time.sleep(0.05)
    marks["ready"] = time.perf_counter() - t0
    srv.stop()
    return marks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8390)
    ap.add_argument("--out", default="bench/results/startup-cpu.md")
    args = ap.parse_args()
    marks = one_run(args.port)
    hw = hardware.describe()["summary"]
    lines = [f"# Server start -> ready (embedded SmolLM2-135M, vllm {hardware.versions().get('vllm')})", "",
             f"Hardware: {hw}. Measured {time.strftime('%Y-%m-%d %H:%M')}.", "",
             "| moment | seconds after Start |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in marks.items()]
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
