"""What one vLLM start costs in CPU, as the test suite starts it (the embedded model, --enforce-eager, 1 GiB of KV
cache, 2048 tokens), under environment variants, interleaved; and where a start's imports go.

    flock /tmp/heavy.lock .venv/bin/python bench/start_cost.py [--rounds 2] [VARIANT ...]
    flock /tmp/heavy.lock .venv/bin/python bench/start_cost.py --importtime [VARIANT]

A start is VLLMServer.start until ready, then stop(); its CPU is user + system of every process of the tree, the
short-lived ones and the orphans included (this process is the tree's subreaper and reads RUSAGE_CHILDREN before and
after). `--importtime` starts once with PYTHONPROFILEIMPORTTIME=1 and reads the server's log: for each process (each
Python that printed import times: the API server, EngineCore, the worker), its total import time and its slowest
top-level imports. Variants: see VARIANTS."""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache" / "serving-lab" / "models"))
os.environ["SERVING_LAB_HOME"] = tempfile.mkdtemp(prefix="start-cost-")

from common import free_port  # noqa: E402 - bench/common.py puts the project on the path
from engine.observe import hardware  # noqa: E402
from engine.serving import models  # noqa: E402
from engine.serving.config import ServerConfig  # noqa: E402
from engine.serving.server import VLLMServer  # noqa: E402
from engine.settings import from_env  # noqa: E402

SINGLE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
VARIANTS: dict[str, dict[str, str]] = {
    "normal": {},
    "single": SINGLE,  # the API server and EngineCore (the model in it, "uni" executor), one OMP thread
}
TOUCHED = {k for env in VARIANTS.values() for k in env} | {"PYTHONPROFILEIMPORTTIME"}
PR_SET_CHILD_SUBREAPER = 36


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one(variant: str, model: str, extra: dict[str, str] | None = None) -> tuple[float, float, list[str]]:
    """(seconds to ready, CPU seconds of the whole tree from start to stopped, the server's log)."""
    for k in TOUCHED:
        os.environ.pop(k, None)
    os.environ.update({**VARIANTS[variant], **(extra or {})})
    s = VLLMServer(from_env(), port=free_port())
    cpu0, t0 = children_cpu(), time.perf_counter()
    s.start(ServerConfig(model=model, port=s.port, max_model_len=2048, cpu_kvcache_gib=1, enforce_eager=True))
    try:
        s.wait_ready(timeout_s=600)
        ready_s = time.perf_counter() - t0
    finally:
        log_path = Path(s._log.path)  # noqa: SLF001 - the whole log, not the snapshot's tail
        s.stop()
    deadline = time.monotonic() + 30  # the tree's last processes are reaped by us (subreaper): count them
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.2)
        except ChildProcessError:
            break
    for k in TOUCHED:
        os.environ.pop(k, None)
    return ready_s, children_cpu() - cpu0, log_path.read_text(errors="replace").splitlines()


LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def imports(log: list[str]) -> None:
    """Each process's import times, split where a new header line starts (the processes start one after another)."""
    procs: list[list[tuple[int, int, str]]] = []
    for line in log:
        if "import time: self [us]" in line:
            procs.append([])
        elif (m := LINE.search(line)) and procs:
            self_us, cum_us, indent, name = int(m[1]), int(m[2]), len(m[3]), m[4]
            if indent == 1:  # a top-level import of that process
                procs[-1].append((cum_us, self_us, name))
    for i, top in enumerate(procs):
        total = sum(c for c, _, _ in top) / 1e6
        print(f"process {i + 1}: {len(top)} top-level imports, {total:.1f} s in all (wall, with importtime's overhead)")
        for cum, _, name in sorted(top, reverse=True)[:15]:
            print(f"    {cum / 1e6:6.2f} s  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("variants", nargs="*", default=["normal", "single"], choices=sorted(VARIANTS))
    a = ap.parse_args()
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed")
    print("machine:", hardware.summary_line(hardware.describe()), flush=True)
    model = models.embedded(from_env().models).path
    if a.importtime:
        ready_s, cpu, log = one(a.variants[0], model, {"PYTHONPROFILEIMPORTTIME": "1"})
        print(f"{a.variants[0]} with importtime: ready in {ready_s:.0f} s, CPU {cpu:.1f} s")
        imports(log)
        return
    for _ in range(a.rounds):
        for v in a.variants:
            ready_s, cpu, _ = one(v, model)
            print(f"{v}: ready in {ready_s:.0f} s, CPU start to stopped {cpu:.1f} s, load {os.getloadavg()[0]:.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
