"""Done -> exit: the wall time from `python -m engine run`'s "done in" line to the command's exit, against a real
server, for two checkouts of the engine on the same server and workload, interleaved (who goes first alternates).
What the command still does after its last answer (the server's /metrics read until its token
counter settles, the served count, saving the run, printing its summary) should take under a second.

    python bench/done_exit.py --base-url http://127.0.0.1:18533 --tree before=/tmp/main-at-X --tree after=. \
        --repeats 5 --out bench/results/done-exit-cpu.md

Each run: bench/client_cost.py's workload (random prompts, /v1/completions, ignore_eos) at --concurrency, its own
seed, measured by client_cost.measure (the process tree, the "done in" line's moment, the exit's).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.client_cost import measure  # noqa: E402
from bench.fidelity import served_model  # noqa: E402
from engine.observe import hardware  # noqa: E402


def argv(tree: Path, a: argparse.Namespace, model: str, seed: int) -> list[str]:
    """`python -m engine run` in `tree` (exec: the measured process is the command itself)."""
    run = (f"exec .venv/bin/python -m engine run random-512-64 --url {a.base_url} --model-name {model} --input-len "
           f"{a.input_len} --output-len {a.output_len} --num-prompts {a.num_prompts} --concurrency {a.concurrency} "
           f"--endpoint completions --temperature 0 --seed {seed}")
    return ["bash", "-c", f"cd {tree} && {run}"]


def commit(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--tree", action="append", required=True, metavar="NAME=PATH", help="a checkout to run (twice)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--seed", type=int, default=3000)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in a.tree)}
    model, _root = served_model(a.base_url)
    log = Path(tempfile.gettempdir()) / "done-exit.log"
    log.write_text("")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="done-exit-") as d:
        env = {**os.environ, "SERVING_LAB_DB": str(Path(d) / "history.sqlite")}
        for name, tree in trees.items():  # not counted: what a first run does once per boot (the bandwidth)
            measure(argv(tree, a, model, a.seed - 1), "ours", env, log)
        for r in range(a.repeats):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                got = measure(argv(trees[name], a, model, a.seed + 10 * r + len(runs[name])), "ours", env, log)
                runs[name].append({k: got.get(k) for k in ("rc", "after_done_s", "wall_s", "cpu_s")})
                print(f"{name} run {r + 1}: {got.get('after_done_s'):.2f} s from done to exit (rc {got['rc']})",
                      flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": hardware.describe(), "base_url": a.base_url,
              "model": model, "trees": {n: {"path": str(t), "commit": commit(t)} for n, t in trees.items()},
              "load": vars(a) | {"out": str(a.out), "tree": a.tree}, "runs": runs}
    lines = [f"# Done -> exit, `python -m engine run` against a real server ({report['date']})", "",
             f"- Hardware: {report['hardware']['summary']}; server: vLLM at {a.base_url} (`{model}`), on the same "
             "machine", "- Load (after one uncounted run of each checkout): random-512-64 with "
             f"{a.input_len} input / {a.output_len} output tokens, {a.num_prompts} requests, {a.concurrency} in "
             f"flight, /v1/completions; {a.repeats} runs per checkout, interleaved", "",
             "| checkout | commit | done -> exit s (median) | each run | failed runs |", "|---|---|---:|---|---:|"]
    for name, rs in runs.items():
        vals = [x["after_done_s"] for x in rs if x["after_done_s"] is not None]
        lines.append(f"| {name} | {report['trees'][name]['commit']} | "
                     f"{statistics.median(vals):.2f} | {' · '.join(f'{v:.2f}' for v in vals)} | "
                     f"{sum(1 for x in rs if x['rc'] != 0)} |")
    print("\n".join(lines))
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")
        a.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
