"""A/B of the load generator's two candidate transports (httpx over a lean socket layer, aiohttp) against
`vllm bench serve`, on one server and workload, interleaved: per repeat and level the three clients run
in a rotating order, each with fresh prompts from vLLM's own dataset code (bench/fidelity.py's helpers).

    python bench/transport_ab.py --base-url http://127.0.0.1:9700 --concurrency 1 8 32 --repeats 3 \
        --out /tmp/transport-ab.json
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpcore  # noqa: E402,F401  (both transports imported up front: neither run pays an import)
import httpx  # noqa: E402,F401

from bench import fidelity  # noqa: E402
from engine.measure import request, transport_httpx  # noqa: E402,F401

CLIENTS = ("vllm", "aiohttp", "httpx")


def table(out: dict) -> str:
    """Markdown: per level and client, medians over the repeats with (min-max), ratio to vllm bench."""
    rows = ["| concurrency | client | output tok/s | ratio to vllm bench | per-repeat ratios | TTFT mean ms | "
            "client CPU µs/token | load (1 min) |", "|---:|---|---:|---:|---|---:|---:|---:|"]
    med = statistics.median
    for lv in out["levels"]:
        runs = lv["runs"]
        v = {x["repeat"]: x["output_throughput"] for x in runs["vllm"]}
        vm = med(v.values())
        for who in CLIENTS:
            xs = runs[who]
            tps = [x["output_throughput"] for x in xs]
            ttft = [x["mean_ttft_ms"] for x in xs]
            cpu = [x["client_us_per_token"] for x in xs if x.get("client_us_per_token") is not None]
            load = [x["load1"] for x in xs]
            per = ", ".join(f"{x['output_throughput'] / v[x['repeat']]:.2f}" for x in xs) if who != "vllm" else ""
            rows.append(
                f"| {lv['concurrency']} | {who} | {med(tps):.1f} ({min(tps):.1f}-{max(tps):.1f}) | "
                f"{med(tps) / vm:.3f} | {per} | {med(ttft):.0f} ({min(ttft):.0f}-{max(ttft):.0f}) | "
                + (f"{med(cpu):.0f} ({min(cpu):.0f}-{max(cpu):.0f})" if cpu else "n/a")
                + f" | {min(load):.0f}-{max(load):.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--report"]:
        for f in sys.argv[2:]:
            print(f"\n{f}\n\n" + table(json.loads(Path(f).read_text())))
        return 0
    a = fidelity.parse(argv)
    a.base_url = a.base_url.rstrip("/").removesuffix("/v1")
    log = Path("/tmp/transport-ab-vllm-bench.log")
    log.write_text("")
    with __import__("contextlib").ExitStack() as stack:
        if a.synthetic:
            tokenizer = a.tokenizer or fidelity.served_model(a.base_url)[1]
            a.base_url, model = stack.enter_context(fidelity.synthetic_server(a.chunk_delay)), "ok"
        else:
            model, root = fidelity.served_model(a.base_url)
            tokenizer = a.tokenizer or root
        out = {"date": time.strftime("%Y-%m-%d %H:%M"), "args": vars(a) | {"out": str(a.out), "log": str(a.log)},
               "levels": []}
        for i, c in enumerate(a.concurrency):
            n = max(a.min_prompts, a.rounds * c)
            runs: dict[str, list[dict]] = {k: [] for k in CLIENTS}
            for r in range(a.repeats):
                order = CLIENTS[(i + r) % 3:] + CLIENTS[:(i + r) % 3]
                for j, who in enumerate(order):
                    seed = a.seed + 1000 * i + 10 * r + j
                    argv_ = fidelity.bench_argv(a, model, tokenizer, c, n, seed)
                    load = os.getloadavg()[0]
                    if who == "vllm":
                        got = fidelity._pick(fidelity.run_vllm_bench(argv_, log))
                    else:
                        request.TRANSPORT = who
                        os.environ["SERVING_LAB_TRANSPORT"] = who  # client processes, if any
                        got = fidelity._pick(fidelity.run_ours(a, model, fidelity.random_prompts(argv_), c))
                    got["repeat"], got["position"], got["load1"] = r, j, load
                    runs[who].append(got)
                    print(f"c={c} r={r} {who:8s} {fidelity._f(got.get('output_throughput'))} tok/s  TTFT "
                          f"{fidelity._f(got.get('mean_ttft_ms'))} ms  CPU "
                          f"{fidelity._f(got.get('client_us_per_token'), '.0f')} us/tok  load {load:.1f}", flush=True)
            out["levels"].append({"concurrency": c, "num_prompts": n, "runs": runs})
            if a.out:
                a.out.write_text(json.dumps(out, indent=1))
    print(table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
