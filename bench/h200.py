"""The lab on a GPU, measured by the product itself (issue: prove the GPU path on an H200).

Runs, in phases, with one NVML/psutil sampler over the whole sequence:
  naive     naive-5 and static-batch-5 on the shape-only Llama 3 8B (fp16, random weights)
  vllm      server at 2048 / 0.85, then vllm-5-sequential, concurrent-10, stream-300, a sweep to 256
  tuning    restart at 2048 / 0.85 and 512 / 0.90, the lab's 10 concurrent x 100 tokens on each
  failures  a memory fraction too high while another server holds memory; a max-model-len that
            does not fit — each must end in a clear sentence with nothing left running

    python3 bench/h200.py --out OUTDIR naive vllm          # then: tuning failures
Writes OUTDIR/runs-<phases>.json (History export), OUTDIR/telemetry-<phases>.json, a log on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.cli.summary import summary_table  # noqa: E402
from engine.errors import LabError  # noqa: E402
from engine.measure.baseline.naive import run_naive  # noqa: E402
from engine.measure.progress import Progress  # noqa: E402
from engine.measure.workloads.scenarios import SCENARIOS  # noqa: E402
from engine.observe import hardware  # noqa: E402
from engine.observe.telemetry import Telemetry, event_rows, memory_rows, metric_rows  # noqa: E402
from engine.results.store import RunStore  # noqa: E402
from engine.serving import prepare  # noqa: E402
from engine.serving.config import ServerConfig  # noqa: E402
from engine.runs import Runner, Target, tuning_label  # noqa: E402
from engine.serving.server import VLLMServer  # noqa: E402
from engine.settings import from_env  # noqa: E402

PORT = 8300


class Bench:
    def __init__(self, out: Path):
        self.out = out
        self.store = RunStore(out / "history.sqlite")
        self.server: VLLMServer | None = None
        self.naive_pid: dict[str, int] = {}
        self.events: list[tuple[float, str]] = []
        self.tel = Telemetry(server_pid=lambda: self.server.snapshot().pid if self.server else None,
                             metrics_url=self._metrics_url, extra_pids=lambda: dict(self.naive_pid),
                             interval_s=0.5, keep=20000)
        self.tel.start()
        self.spec = prepare.resolve("shape-only", from_env().models)

    def _metrics_url(self):
        if self.server and self.server.snapshot().state == "ready":
            return f"http://127.0.0.1:{PORT}/metrics"
        return None

    def mark(self, label: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {label}", flush=True)
        self.events.append((time.time(), label))

    def config(self, **kw) -> ServerConfig:
        base = ServerConfig(model=self.spec.path, served_model_name="llama3-8b-shape-only", load_format="dummy",
                            dtype="float16", device="cuda", port=PORT, max_model_len=2048,
                            gpu_memory_utilization=0.85)
        return base.with_changes(**kw)

    def start(self, cfg: ServerConfig):
        self.server = VLLMServer(from_env(), port=PORT)
        self.mark(f"vLLM start (max-model-len {cfg.max_model_len}, {cfg.gpu_memory_utilization:g})")
        self.server.start(cfg, model_max_len=self.spec.max_len)
        snap = self.server.wait_ready(timeout_s=400)
        self.events += [e for e in snap.events if e[1] in ("weights loaded", "KV cache allocated", "ready")]
        self.mark(f"ready in {snap.elapsed:.0f} s: KV cache {snap.kv_cache_tokens} tokens, "
                  f"max concurrency {snap.max_concurrency}x")
        return snap

    def stop(self):
        if self.server:
            self.server.stop()
            self.mark("vLLM stop")

    def save(self, r):
        self.store.save(r)
        print(summary_table(r), flush=True)
        return r

    def runner(self) -> Runner:
        """The product's own orchestration (engine.runs), saving here and marking this bench's events."""
        return Runner(self.save, mark=self.mark, models_dir=from_env().models)

    # -- phases ----------------------------------------------------------------------------
    def naive(self):
        for name in ("naive-5", "static-batch-5"):
            spec = SCENARIOS[name].naive_spec(self.spec.path, random_weights=True, dtype="float16")
            self.mark(f"{name} start")
            r = run_naive(spec, observer=_PidObserver(self.naive_pid))
            self.naive_pid.clear()
            self.mark(f"{name} end (worker exited)")
            r.extra.server.placeholder_text = True
            self.save(r)
            print(json.dumps(r.extra.naive.memory and r.extra.naive.memory.to_dict(), indent=1)[:3000], flush=True)

    def vllm(self):
        self.start(self.config())
        try:
            target = Target.of(self.server)
            for name in ("vllm-5-sequential", "concurrent-10", "stream-300"):
                scn = SCENARIOS[name]
                self.runner().load(scn.load_spec(warmup=scn.concurrency), target)
            self.runner().sweep(SCENARIOS["sweep"].load_spec(num_requests=8), [1, 2, 4, 8, 16, 32, 64, 128, 256],
                                target, rounds=3)
        finally:
            self.stop()

    def tuning(self):
        scn = SCENARIOS["tuning"]
        for changes in scn.configs:
            cfg = self.config(**changes)
            self.start(cfg)
            try:
                self.runner().load(scn.load_spec(warmup=10, label=tuning_label(cfg)), Target.of(self.server))
            finally:
                self.stop()

    def failures(self):
        # 1. Something else holds GPU memory, then we ask for 0.85 of it.
        holder = VLLMServer(from_env(), port=PORT + 1)
        holder.start(self.config(port=PORT + 1, gpu_memory_utilization=0.5, enforce_eager=True))
        holder.wait_ready(timeout_s=400)
        self.mark("holder server ready (0.5 of the GPU)")
        srv = VLLMServer(from_env(), port=PORT)
        try:
            srv.start(self.config())
            srv.wait_ready(timeout_s=400)
            print("UNEXPECTED: second server started", flush=True)
        except LabError as e:
            print(f"memory fraction too high -> {type(e).__name__}: {e}", flush=True)
        print(f"  left running: pid={srv.snapshot().pid} state={srv.snapshot().state}", flush=True)
        srv.stop()
        holder.stop()
        self.mark("holder stopped")
        # 2. max-model-len that does not fit: 16 GB of weights in 14% of the GPU leaves no KV room.
        srv = VLLMServer(from_env(), port=PORT)
        try:
            srv.start(self.config(max_model_len=8192, gpu_memory_utilization=0.13, enforce_eager=True),
                      model_max_len=self.spec.max_len)
            srv.wait_ready(timeout_s=400)
            print("UNEXPECTED: tiny-memory server started", flush=True)
        except LabError as e:
            print(f"max-model-len does not fit -> {type(e).__name__}: {e}", flush=True)
        print(f"  left running: pid={srv.snapshot().pid} state={srv.snapshot().state}", flush=True)
        srv.stop()

    def dump(self, tag: str):
        samples = self.tel.samples()
        (self.out / f"runs-{tag}.json").write_text(self.store.export_json())
        (self.out / f"telemetry-{tag}.json").write_text(json.dumps({
            "memory": memory_rows(samples), "metrics": metric_rows(samples), "events": event_rows(self.events),
            "gpus": hardware.gpus()}))


class _PidObserver(Progress):
    def __init__(self, pids):
        self.pids = pids

    def on_worker(self, pid):
        self.pids["naive worker"] = pid

    def on_stage(self, text):
        print(f"  naive: {text}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("phases", nargs="+", choices=["naive", "vllm", "tuning", "failures"])
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    b = Bench(args.out)
    tag = "-".join(args.phases)
    try:
        for phase in args.phases:
            b.mark(f"phase {phase}")
            getattr(b, phase)()
    finally:
        b.dump(tag)
        b.tel.stop()


if __name__ == "__main__":
    main()
