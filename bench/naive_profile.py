"""Where does the naive baseline's time go? Profiles plain transformers generate() on one GPU.

Builds the model once (random weights from the folder's config, as the naive worker does for the
shape-only model), then times the lab's five prompts x N tokens under variants that isolate the
worker's extras (token clock, remove_invalid_values, sampling) and the warm-up, counts the CUDA
allocator's device allocations per request, and profiles a short generate() with torch.profiler.

    python3 bench/naive_profile.py --model .gpu/models/llama3-8b-shape-only --out results/
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.measure.workloads import prompts as lab_prompts  # noqa: E402


def sh(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"({e})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--worker", action="store_true", help="first run the product's naive worker (naive-5) as is")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)

    if a.worker:
        from engine.measure.baseline.naive import run_naive
        from engine.measure.workloads.scenarios import SCENARIOS

        t = time.perf_counter()
        r = run_naive(SCENARIOS["naive-5"].naive_spec(a.model, random_weights=True, dtype=a.dtype, device=a.device))
        lat = [round(x.end_time - x.send_time, 3) for x in r.measured]
        print("worker naive-5:", lat, "wall", round(time.perf_counter() - t, 1), "s", flush=True)
        (a.out / "naive-profile-worker.json").write_text(json.dumps({"latencies": lat, "extra": r.extra}, default=str))

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.generation.streamers import BaseStreamer

    from engine.measure.baseline.naive_worker import make_clock

    report: dict = {"host": {
        "cpu": sh("lscpu | grep -E 'Model name|^CPU\\(s\\)|MHz'"), "affinity": len(os.sched_getaffinity(0)),
        "loadavg": os.getloadavg(), "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "clocks_before": sh("nvidia-smi --query-gpu=clocks.sm,clocks.mem,pstate,power.draw --format=csv"),
    }}
    print(json.dumps(report, indent=1), flush=True)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda *x: None)
    tok = AutoTokenizer.from_pretrained(a.model)
    config = AutoConfig.from_pretrained(a.model)
    t = time.perf_counter()
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, a.dtype))
    model.eval()
    sync()
    report["build_s"] = time.perf_counter() - t
    report["attn"] = getattr(model.config, "_attn_implementation", None)
    print("built in", report["build_s"], "attn", report["attn"], flush=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in lab_prompts.LAB_SEQUENTIAL]

    class Steps(BaseStreamer):
        def __init__(self):
            self.t: list[float] = []

        def put(self, value):
            self.t.append(time.perf_counter())

        def end(self):
            pass

    def enc(batch):
        e = tok(batch, return_tensors="pt", padding=len(batch) > 1, add_special_tokens=False)
        return {k: v.to(dev) for k, v in e.items()}

    def allocs():
        if not cuda:
            return 0, 0
        s = torch.cuda.memory_stats(dev)
        return s.get("num_device_alloc", 0), s.get("num_device_free", 0)

    def one(batch, n, sample, riv, streamer_kind):
        kw = {"max_new_tokens": n, "pad_token_id": tok.pad_token_id, "do_sample": sample}
        if sample:
            kw["temperature"] = 0.7
        if riv:
            kw["remove_invalid_values"] = True
        t0 = time.perf_counter()
        st = None
        if streamer_kind == "steps":
            st = Steps()
        elif streamer_kind == "clock":
            st = make_clock(torch, t0, len(batch), set(), None)
        a0 = allocs()
        e = enc(batch)
        with torch.no_grad():
            out = model.generate(**e, **kw, streamer=st) if st else model.generate(**e, **kw)
        sync()
        wall = time.perf_counter() - t0
        a1 = allocs()
        row = {"wall_s": round(wall, 3), "new": int(out.shape[1] - e["input_ids"].shape[1]),
               "prompt": int(e["input_ids"].shape[1]), "device_allocs": a1[0] - a0[0], "device_frees": a1[1] - a0[1]}
        if isinstance(st, Steps) and len(st.t) > 2:
            d = [b - c for b, c in zip(st.t[2:], st.t[1:-1])]
            d.sort()
            row.update(first_ms=round(1000 * (st.t[1] - t0), 1), step_p50_ms=round(1000 * d[len(d) // 2], 2),
                       step_p90_ms=round(1000 * d[int(len(d) * 0.9)], 2), step_max_ms=round(1000 * d[-1], 1))
        return row

    variants = [
        # (name, warm-up tokens before, sample, remove_invalid_values, streamer)
        ("worker-like, first pass (2-token warm-up)", 2, True, True, "clock"),
        ("worker-like, second pass", 0, True, True, "clock"),
        ("worker-like + step timer", 0, True, True, "steps"),
        ("sampling, no remove_invalid_values", 0, True, False, "steps"),
        ("greedy, nothing extra", 0, False, False, "steps"),
        ("greedy, no streamer", 0, False, False, None),
    ]
    report["sequential"] = []
    for name, warm, sample, riv, st in variants:
        if warm:
            one(texts[:1], warm, sample, riv, None)
        rows = [one([x], a.tokens, sample, riv, st) for x in texts]
        walls = [r["wall_s"] for r in rows]
        entry = {"variant": name, "walls": walls, "mean_s": round(sum(walls) / len(walls), 3), "rows": rows}
        report["sequential"].append(entry)
        print(json.dumps(entry), flush=True)

    # Static batch of 5 (left padding), as the worker does it.
    tok.padding_side = "left"
    report["static"] = [one(texts, a.tokens, True, True, "steps") for _ in range(2)]
    print("static", json.dumps(report["static"]), flush=True)
    tok.padding_side = "right"

    # Forward-only decode step at batch 1 (GPU-bound floor of one step without generate()'s Python).
    from transformers import DynamicCache

    e = enc(texts[:1])
    cache = DynamicCache(config=config)
    with torch.no_grad():
        out = model(**e, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        sync()
        t = time.perf_counter()
        for _ in range(50):
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        sync()
    report["forward_step_ms"] = round(1000 * (time.perf_counter() - t) / 50, 2)
    print("forward step ms", report["forward_step_ms"], flush=True)

    # torch.profiler over a 20-token generate: CPU-side vs GPU-side time.
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        one(texts[:1], 20, True, True, "clock")
    ka = prof.key_averages()
    cuda_total = sum(getattr(k, "self_device_time_total", 0) or 0 for k in ka) / 1000
    report["profile_20_tokens"] = {"gpu_busy_ms": round(cuda_total, 1)}
    table = ka.table(sort_by="self_cpu_time_total", row_limit=25)
    (a.out / "naive-profile-table.txt").write_text(table)
    print(table[:6000], flush=True)
    report["clocks_after"] = sh("nvidia-smi --query-gpu=clocks.sm,clocks.mem,pstate,power.draw --format=csv")
    (a.out / "naive-profile.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("forward_step_ms", "profile_20_tokens", "clocks_after")}), flush=True)


if __name__ == "__main__":
    main()
