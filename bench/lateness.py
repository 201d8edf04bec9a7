"""Does the client keep its schedule? Poisson runs at rising rates against
tests/fakes.py in its own process, paced (a chunk every --chunk-delay s, a server that never slows down), and
for each the planned sends that went out late (engine.measure.judge.lateness: more than 10 ms behind) and the
99th percentile of the lateness. Where p99 climbs, the client itself is the bottleneck, not the server.

    .venv/bin/python bench/lateness.py --rates 10,25,50,100,200 --seconds 6 --out bench/results/lateness-cpu.md"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from engine.measure.load.loadgen import client_name, run_load  # noqa: E402
from engine.measure.load.spec import LoadSpec  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="10,25,50,100,200")
    p.add_argument("--seconds", type=float, default=6.0, help="each rate's schedule, in seconds")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--chunk-delay", type=float, default=0.02)
    p.add_argument("--out")
    a = p.parse_args()
    fake = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes.py"), "--chunk-delay", str(a.chunk_delay)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(fake.stdout.readline())
        lines = [f"# Client lateness against a paced fake server ({platform.node()}, {os.cpu_count()} cores, "
                 f"load average {os.getloadavg()[0]:.1f} at the start)", "",
                 f"{client_name()}, one client process, Poisson arrivals, {a.tokens} tokens an answer, a chunk every "
                 f"{a.chunk_delay * 1000:.0f} ms; late = more than 10 ms behind the plan. Machine shared with other "
                 "work while measured.", "",
                 "| rate (req/s) | requests | late | p99 lateness (ms) | worst (ms) | peak in flight |",
                 "|---|---|---|---|---|---|"]
        from engine.measure.judge import lateness, stats

        for rate in [float(r) for r in a.rates.split(",")]:
            n = max(1, round(rate * a.seconds))
            spec = LoadSpec(base_url=f"http://127.0.0.1:{port}", model="ok", prompts=["hi"], num_requests=n,
                            shape="poisson", rate=rate, concurrency=max(1, round(rate * a.tokens * a.chunk_delay)),
                            max_tokens=a.tokens, workers=1, seed=1)
            result = run_load(spec)
            late = lateness.of(result.records)
            row = (f"| {rate:g} | {n} | {late.late} | {late.p99_s * 1000:.1f} | {late.worst_s * 1000:.1f} | "
                   f"{stats.peak_in_flight(result.records)} |")
            print(row, flush=True)
            lines.append(row)
            time.sleep(1)
        if a.out:
            Path(a.out).write_text("\n".join(lines) + "\n")
    finally:
        fake.kill()


if __name__ == "__main__":
    main()
