"""What the benches that drive the product's Lab share: a Lab on its own history in OUT, and waiting for its
server to be ready (saying why when it failed)."""
from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.lab import Lab  # noqa: E402
from engine.measure.workloads.defaults import load_test_spec  # noqa: E402
from engine.observe import hardware  # noqa: E402
from engine.results.store import RunStore  # noqa: E402
from engine.serving import models  # noqa: E402
from engine.serving.states import FAILED  # noqa: E402
from engine.settings import from_env  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_lab(out: Path, port: int) -> Lab:
    """A Lab whose runs go to OUT/history.sqlite, the machine it runs on printed first."""
    out.mkdir(parents=True, exist_ok=True)
    print("machine:", hardware.summary_line(hardware.describe()), flush=True)
    return Lab(from_env(), port=port, store=RunStore(out / "history.sqlite"))


def wait_ready(lab: Lab, since: float) -> bool:
    """Until the Lab's server is ready (True, its time since `since` printed) or failed (False, with why)."""
    while not lab.ready():
        snap = lab.server_snapshot()
        if snap.state == FAILED:
            print("start failed:", snap.error, "\n".join(snap.log_tail[-20:]))
            return False
        time.sleep(1)
    print(f"ready in {time.time() - since:.0f} s", flush=True)
    return True


def serve(lab: Lab, model: str) -> bool:
    """Start `model` (a catalogue name: shape-only, embedded) at the lab's GPU settings, or follow the server a
    previous bench left on the port; True once ready."""
    spec = models.pick(model, from_env().models)
    t0 = time.time()
    if not lab.ready():
        lab.start_server(lab.default_config(spec).with_changes(max_model_len=2048, gpu_memory_utilization=0.85), spec)
    return wait_ready(lab, t0)


def level_run(lab: Lab, level: int, tokens: int, synthetic: bool = True):
    """One warmed-up load test at `level` in flight through the Lab: 2 × level requests (10 at the least) of `tokens`
    output tokens each (ignore_eos). The run, or None with why printed when it failed."""
    n = max(10, 2 * level)
    spec = load_test_spec("concurrency", n, tokens, max_len=lab.serving_max_len(), ignore_eos=True,
                          concurrency=level, synthetic=synthetic, warmup=True)
    job = lab.run_load(spec)
    while job.active:
        time.sleep(0.5)
    if job.error:
        print(f"level {level} failed: {job.error}", flush=True)
        return None
    return job.result
