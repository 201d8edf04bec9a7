"""kill -9 of the vLLM API server: how fast the rest of its tree (EngineCore, workers) is stopped and its
memory (GPU memory through NVML, else RAM) returned — with the product's own CLI.

1. `python -m engine serve ...` in the foreground (it watches its server, as the app does): kill -9 the
   API server, time until no process of the tree is left and no GPU lists one of them.
2. `python -m engine serve ... --detach` (nobody watches): kill -9 the API server; the tree survives
   (as it does with vLLM alone); then `python -m engine status`, which finds the leftovers by their
   tag, stops them, and says so.

  python bench/tree_kill.py --out bench/results/tree-kill-h200.md -- --model shape-only --tensor-parallel-size 2
  python bench/tree_kill.py --out bench/results/tree-kill-cpu.md -- --model embedded --enforce-eager
(everything after -- goes to `python -m engine serve`)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.observe import nvml  # noqa: E402
from engine.paths import runtime_dir  # noqa: E402
from engine.settings import from_env  # noqa: E402
from engine.serving import proctree  # noqa: E402


def gpu_pids() -> dict[int, int]:
    return {pid: used for g in nvml.devices() for pid, used in g["procs"].items()}


def tree_state(pids: list[int]) -> tuple[list[int], dict[int, int]]:
    alive = [p for p in pids if proctree.same_process(p, None)]
    on_gpu = {p: b for p, b in gpu_pids().items() if p in pids}
    return alive, on_gpu


def wait_gone(pids: list[int], timeout_s: float) -> float | None:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        alive, on_gpu = tree_state(pids)
        if not alive and not on_gpu:
            return time.time() - t0
        time.sleep(0.1)
    return None


def serve(args, detach: bool) -> tuple[subprocess.Popen, int, list[int]]:
    argv = [sys.executable, "-m", "engine", "serve", "--port", str(args.port), *args.serve]
    if detach:
        argv.append("--detach")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        print("  " + line.rstrip(), flush=True)
        if line.startswith("ready in"):
            break
    rec = json.loads((runtime_dir(from_env()) / f"server-{args.port}.json").read_text())
    time.sleep(2)
    return proc, rec["pid"], [p.pid for p in proctree.family(rec["pid"])]


def _cpu_model() -> str:
    try:
        return next(x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "CPU"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--out", required=True)
    ap.add_argument("serve", nargs=argparse.REMAINDER, help="-- then options of `python -m engine serve`")
    args = ap.parse_args()
    args.serve = [a for a in args.serve if a != "--"]
    lines = []

    # 1. watched
    proc, api, tree = serve(args, detach=False)
    before = {p: b for p, b in gpu_pids().items() if p in tree}
    names = [proctree.name(psutil.Process(p)) for p in tree if proctree.same_process(p, None)]
    os.kill(api, signal.SIGKILL)
    gone = wait_gone(tree, 60)
    out, _ = proc.communicate(timeout=60)
    said = [line for line in out.splitlines() if line.startswith("error:")]
    lines += ["## 1. The CLI watches its server (as the app does)", "",
              f"Tree: {', '.join(names)}.",
              "GPU memory held before the kill: " + (", ".join(f"pid {p} {b / 2**30:.1f} GiB" for p,
                                                               b in before.items())
                                                     or "none (no GPU)") + ".",
              f"kill -9 of the API server (pid {api}): **no process of the tree left"
              f"{' and no GPU process of ours' if before else ''} after {gone:.1f} s**." if gone is not None
              else f"kill -9 of the API server (pid {api}): processes still there after 60 s: {tree_state(tree)}.",
              f"The CLI said: `{said[0] if said else out.strip().splitlines()[-1]}`", ""]

    # 2. detached
    proc, api, tree = serve(args, detach=True)
    proc.wait()
    os.kill(api, signal.SIGKILL)
    time.sleep(5)
    alive, on_gpu = tree_state(tree)
    t0 = time.time()
    status = subprocess.run([sys.executable, "-m", "engine", "status", "--port", str(args.port)], cwd=ROOT,
                            capture_output=True, text=True)
    gone = wait_gone(tree, 60)
    gone = None if gone is None else time.time() - t0
    lines += ["## 2. Nobody watches (`serve --detach`), then `python -m engine status`", "",
              f"5 s after kill -9 of the API server (pid {api}): {len(alive)} processes of its tree still run"
              f"{f', {len(on_gpu)} of them on a GPU' if on_gpu else ''} (vLLM does not stop them itself).",
              f"`engine status` said: `{status.stderr.strip()}`",
              f"**Nothing of the tree left {gone:.1f} s after `engine status` started.**" if gone is not None
              else f"Still there 60 s after `engine status`: {tree_state(tree)}.", ""]

    gpus = nvml.devices()
    hw = (f"{len(gpus)}x {gpus[0]['name']}" if gpus else _cpu_model()) + f", {os.cpu_count()} CPU cores"
    text = "\n".join([f"# kill -9 of the vLLM API server: the tree goes with it (`serve {' '.join(args.serve)}`)", "",
                      f"Measured {datetime.now():%Y-%m-%d %H:%M} on {hw} with `python bench/tree_kill.py "
                      f"{' '.join(sys.argv[1:])}`.", "", *lines])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
