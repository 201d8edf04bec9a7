"""Done -> exit, part by part: where `python -m engine run` spends the time between its "done in" line and its exit.
Each run goes through a wrapper that stamps time.perf_counter (one clock for every process on
Linux) around each part of the command's end, without changing the engine: the server's /metrics read, the KV
watch, the energy meter, the disturbance watch, cold or warm, saving to the history, the printed summary, Python's
own end (threads joined, atexit handlers); the parent stamps the "done in" line as it reads it and the exit as it
reaps the process, and what is left after the last stamp is the interpreter's teardown.

    python bench/done_exit_parts.py --base-url http://127.0.0.1:18533 --tree before=/tmp/main-at-X --tree after=. \
        --repeats 5 --out bench/results/done-exit-cpu-3.md

The workload is bench/done_exit.py's (random prompts, /v1/completions, 8 in flight, 32 requests of 32 + 16 tokens),
each run its own seed, the checkouts interleaved (who goes first alternates), all saving to one temporary history.
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

from bench.done_exit import commit  # noqa: E402
from bench.fidelity import served_model  # noqa: E402
from engine.observe import hardware  # noqa: E402

# The wrapper, run as `python -c` in a checkout: each (module, class, function) stamped on entry and return.
STAMPED = (("engine.observe.disturbance", "Watch", "stop", "disturbance watch"),
           ("engine.runs.counts", "ServerCount", "finish", "/metrics read (server's count and view)"),
           ("engine.observe.kvwatch", "KvWatch", "finish", "KV watch"),
           ("engine.runs.runner", "Runner", "_energy", "energy"),
           ("engine.runs.runner", "Runner", "_judge_warmth", "cold or warm"),
           ("engine.results.store", "RunStore", "save", "save to the history"),
           ("engine.cli.run", None, "_said", "summary printed"),
           ("engine.cli", None, "main", "main() returned"))
WRAPPER = """
import atexit, functools, importlib, json, os, sys, threading, time
sys.path.insert(0, os.getcwd())
out = open(os.environ["DONE_EXIT_STAMPS"], "a", buffering=1)
def stamp(what):
    out.write(json.dumps([time.perf_counter(), what]) + "\\n")
def wrap(mod, cls, name, label):
    owner = importlib.import_module(mod)
    owner = getattr(owner, cls) if cls else owner
    f = getattr(owner, name)
    def g(*a, **k):
        stamp(label + " >")
        try:
            return f(*a, **k)
        finally:
            stamp(label + " <")
    setattr(owner, name, staticmethod(g) if cls and isinstance(owner.__dict__.get(name), staticmethod) else g)
for m, c, n, label in json.loads(os.environ["DONE_EXIT_PARTS"]):
    wrap(m, c, n, label)
shutdown = threading._shutdown
def joined():
    stamp("threads joined >"); shutdown(); stamp("threads joined <")
threading._shutdown = joined
atexit.register(lambda: stamp("atexit handlers <"))  # the first registered runs last (unless the command exits)
import engine.cli as cli
sys.argv[0] = "engine"
entry = getattr(cli, "command", None) or cli.main  # the checkout's own entry (`python -m engine`)
atexit.register(lambda: stamp("atexit handlers >"))
raise SystemExit(entry())
"""


def run_once(tree: Path, a: argparse.Namespace, model: str, seed: int, env: dict[str, str]) -> dict[str, Any]:
    """One command in `tree`: the parent's "done" and exit moments and the wrapper's stamps, relative to "done"."""
    stamps = Path(env["SERVING_LAB_DB"]).with_name(f"stamps-{seed}.jsonl")
    argv = [str(tree / ".venv/bin/python"), "-c", WRAPPER, "run", "random-512-64", "--url", a.base_url,
            "--model-name", model, "--input-len", str(a.input_len), "--output-len", str(a.output_len),
            "--num-prompts", str(a.num_prompts), "--concurrency", str(a.concurrency), "--endpoint", "completions",
            "--temperature", "0", "--seed", str(seed)]
    env = {**env, "DONE_EXIT_STAMPS": str(stamps),
           "DONE_EXIT_PARTS": json.dumps([list(s) for s in STAMPED])}
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    done, tail = None, []
    for line in proc.stdout:  # type: ignore[union-attr]
        if done is None and b"done in " in line:
            done = time.perf_counter()
        tail = (tail + [line.decode(errors="replace")])[-5:]
    proc.wait()
    t_exit = time.perf_counter()
    if proc.returncode != 0 or done is None:
        raise SystemExit(f"run failed (rc {proc.returncode}):\n{''.join(tail)}")
    marks = [(t - done, what) for t, what in (json.loads(x) for x in stamps.read_text().splitlines())]
    return {"exit_s": t_exit - done, "marks": [m for m in marks if m[0] > -1]}


def parts(run: dict[str, Any]) -> dict[str, float]:
    """Seconds in each stamped part (first entry to last return), the rest of the command's end, Python's own end,
    and the teardown after the last stamp."""
    entered: dict[str, float] = {}
    returned: dict[str, float] = {}
    for t, what in run["marks"]:
        label, edge = what.rsplit(" ", 1)
        if edge == ">":
            entered.setdefault(label, t)
        else:
            returned[label] = t
    out = {label: returned.get(label, t) - t for label, t in entered.items()}  # no return: it exited there
    out["main() returned"] = returned["main() returned"]  # entered long before "done": when, after it
    last = max(t for t, _ in run["marks"])
    out["teardown (after the last stamp)"] = run["exit_s"] - last
    out["done -> exit"] = run["exit_s"]
    return out


ORDER = ["disturbance watch", "/metrics read (server's count and view)", "KV watch", "energy", "cold or warm",
         "save to the history", "summary printed", "main() returned", "threads joined", "atexit handlers",
         "teardown (after the last stamp)", "done -> exit"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--seed", type=int, default=5000)
    p.add_argument("--note", default="", help="the machine's load, said in the report")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in a.tree)}
    model, _root = served_model(a.base_url)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    loads = []
    with tempfile.TemporaryDirectory(prefix="done-exit-") as d:
        env = {**os.environ, "SERVING_LAB_DB": str(Path(d) / "history.sqlite")}
        env.pop("PYTHONUNBUFFERED", None)  # as a user's shell has it: the command's own flushes must do
        for k, tree in enumerate(trees.values()):  # not counted: what a first run does once per boot
            run_once(tree, a, model, a.seed - 1 - k, env)
        for r in range(a.repeats):
            loads.append(os.getloadavg()[0])
            for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                got = run_once(trees[name], a, model, a.seed + 10 * r + len(runs[name]), env)
                runs[name].append(got)
                print(f"{name} run {r + 1}: {got['exit_s']:.3f} s from done to exit", flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": hardware.describe(), "base_url": a.base_url,
              "model": model, "load_1min": loads, "note": a.note,
              "trees": {n: {"path": str(t), "commit": commit(t)} for n, t in trees.items()},
              "settings": {k: v for k, v in vars(a).items() if k not in ("out", "tree")}, "runs": runs}
    text = markdown(report)
    print(text)
    if a.out:
        a.out.write_text(text)
        a.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    return 0


def markdown(report: dict[str, Any]) -> str:
    """The report's table: each part's median per checkout, then each run's done -> exit."""
    table = {name: [parts(x) for x in rs] for name, rs in report["runs"].items()}
    names, loads, s = list(table), report["load_1min"], report["settings"]
    lines = [f"# Done -> exit, part by part: `python -m engine run` against a real server ({report['date']})", "",
             f"- Hardware: {report['hardware']['summary']}; server: vLLM at {report['base_url']} "
             f"(`{report['model']}`), on the same machine; 1-minute load {min(loads):.1f}-{max(loads):.1f} at the "
             f"runs' starts. {report['note']}".rstrip(),
             f"- Load: random-512-64, {s['input_len']} input / {s['output_len']} output tokens, {s['num_prompts']} "
             f"requests, {s['concurrency']} in flight, /v1/completions, stdout a pipe (not PYTHONUNBUFFERED); after "
             f"one uncounted run of each checkout, {s['repeats']} runs each, interleaved",
             "- " + "; ".join(f"{n}: {report['trees'][n]['commit']}" for n in names), "",
             "Median seconds of each part after the \"done in\" line (a part is a stamped call, entry to return):", "",
             "| part | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for part in ORDER:
        cells = []
        for n in names:
            vals = [x[part] for x in table[n] if part in x]
            cells.append(f"{statistics.median(vals):.3f}" if vals else "—")
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    lines += ["", "Each run's done -> exit, in order: " + "; ".join(
        f"{n} " + " · ".join(f"{x['done -> exit']:.2f}" for x in table[n]) for n in names)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
