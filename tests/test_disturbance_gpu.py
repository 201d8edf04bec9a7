"""Another process on the GPU beside a run, the disturbance check's GPU side: NVML's compute processes on the run's
GPU that are not the run's own, their memory and their share of the GPU's time, recorded in the run's disturbance
part as the CPU's is and said next to its numbers. This machine has no GPU: a fake pynvml stands in for the driver at
the one boundary the code reads it from (engine.observe.nvml's pynvml), and the CPU path is checked unchanged."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from engine.messages import translate
from engine.observe import disturbance, nvml
from engine.results.records import Beside, Disturbance, Notes
from tests.test_naive import model_dir, tiny_random_dir  # noqa: F401 - fixtures the naive run uses
from tests.said import values

GB = 1024 ** 3
OTHER = 4_000_000  # a pid on the GPU that is no process of this machine's run (no pid is this high here)
CPU_KEYS = {"seconds", "cores", "others_cores", "steal_cores"}
GPU_KEYS = ("gpus", "gpu_others", "gpu_others_gb", "gpu_others_busy")


class NotFound(Exception):
    value = 6  # NVML_ERROR_NOT_FOUND: no sample since the time asked


class FakeNvml:
    """pynvml's calls the GPU watch makes, over GPUs whose compute processes ({pid: bytes}) and per-process SM
    shares ({pid: per cent}, None: a driver that does not say) the test sets."""

    NVML_ERROR_NOT_FOUND = 6

    def __init__(self, procs: dict[int, dict[int, int]], busy: dict[int, dict[int, float] | None]):
        self.procs, self.busy = procs, busy
        self.asked_since: list[int] = []

    def nvmlDeviceGetCount(self):
        return len(self.procs)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=sum(self.procs[h].values()), total=80 * GB)

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=b) for pid, b in self.procs[h].items()]

    def nvmlDeviceGetProcessUtilization(self, h, since):
        self.asked_since.append(since)
        shares = self.busy.get(h)
        if shares is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        if not shares:
            raise NotFound()
        now = int(time.time() * 1e6)
        return [SimpleNamespace(pid=pid, timeStamp=now, smUtil=share, memUtil=0) for pid, share in shares.items()]


@pytest.fixture
def server():
    """A process standing for the run's server (a child of this one, as a server the app started is)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield p.pid
    p.kill()
    p.wait()


def _watched(nv: FakeNvml | None, server: int) -> Disturbance:
    watch = disturbance.Watch([server], nv=nv)
    watch.start()
    time.sleep(0.3)
    out = watch.stop()
    assert out is not None
    return out


def _gpu(d: Disturbance) -> dict:
    return {k: getattr(d, k) for k in GPU_KEYS}


def _notes(d: Disturbance, gpu_only: bool = True) -> Notes:
    """The reading as a run keeps it; `gpu_only`: its GPU part alone (what this busy machine's CPU says, apart)."""
    kept = Disturbance(**_gpu(d)) if gpu_only else d
    return Notes(beside=Beside(disturbance=disturbance.record(kept, None, None, 0)))


def test_another_process_computing_on_the_runs_gpu_is_recorded_and_said(server):
    # GPU 0: the server with 60 GB and another process with 5 GB using 40 % of the SM time; GPU 1: someone else's job
    nv = FakeNvml({0: {server: 60 * GB, OTHER: 5 * GB}, 1: {OTHER + 1: 70 * GB}},
                  {0: {server: 55.0, OTHER: 40.0}, 1: {OTHER + 1: 99.0}})
    d = _watched(nv, server)
    assert _gpu(d) == {"gpus": [0], "gpu_others": 1, "gpu_others_gb": 5.0,
                       "gpu_others_busy": 40.0}  # GPU 1 is not the run's
    assert CPU_KEYS <= set(d.to_dict())  # beside the CPU's reading, in the same part
    assert all(since > 0 for since in nv.asked_since)  # the samples asked for are the measured part's only
    notes = _notes(d)
    assert disturbance.disturbed(notes)
    assert values(disturbance.said(notes))["what"] == {"n": 1, "gb": "5.0", "share": "40 %"}
    ko = translate(disturbance.said(notes), "ko")
    assert "GPU" in ko and "5.0 GB" in ko and "40 %" in ko and "Measured" not in ko


def test_an_idle_process_holding_memory_is_recorded_but_disturbs_nothing(server):
    nv = FakeNvml({0: {server: 60 * GB, OTHER: 2 * GB}}, {0: {server: 80.0}})
    d = _watched(nv, server)
    assert (d.gpu_others, d.gpu_others_gb, d.gpu_others_busy) == (1, 2.0, 0.0)
    assert not disturbance.disturbed(_notes(d))  # it held memory, took no time


def test_a_driver_that_does_not_say_how_busy_counts_any_other_process(server):
    nv = FakeNvml({0: {server: 60 * GB, OTHER: 3 * GB}}, {0: None})
    d = _watched(nv, server)
    assert d.gpu_others_busy is None and disturbance.disturbed(_notes(d))
    assert values(disturbance.said(_notes(d)))["what"] == {"n": 1, "gb": "3.0"}


def test_a_process_that_came_and_went_between_the_readings_still_counts(server):
    nv = FakeNvml({0: {server: 60 * GB}}, {0: {server: 50.0, OTHER: 30.0}})
    d = _watched(nv, server)
    assert (d.gpu_others, d.gpu_others_busy) == (1, 30.0)


def test_no_gpu_of_the_runs_judges_nothing_and_the_cpu_path_is_unchanged(server):
    # NVML lists only processes that are not the run's (a server elsewhere, or pids of another namespace)
    nv = FakeNvml({0: {OTHER: 60 * GB}}, {0: {OTHER: 90.0}})
    assert set(_watched(nv, server).to_dict()) == CPU_KEYS
    # this machine: no GPU, the real pynvml (or none): the CPU's reading alone, as before
    assert not nvml.available()
    assert set(_watched(None, server).to_dict()) == CPU_KEYS


def test_a_run_records_the_gpu_beside_it_through_the_driver_boundary(monkeypatch):
    """A load run through the Runner, NVML answered by the fake at engine.observe.nvml's pynvml: the saved run's
    disturbance part has the other process, and its verdict against a quiet run is withheld, saying why."""
    from tests.fakes import FakeOpenAIServer

    from engine.measure.judge import verdict
    from engine.measure.load.spec import LoadSpec
    from engine.runs import Runner, Target
    from engine.serving.endpoint import Endpoint

    # the fake server answers from a thread of this process: this process is the run's own on GPU 0
    nv = FakeNvml({0: {os.getpid(): 20 * GB, OTHER: 7 * GB}}, {0: {os.getpid(): 30.0, OTHER: 25.0}})
    monkeypatch.setattr(nvml, "_lib", lambda: nv)
    spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=4, max_tokens=4)
    with FakeOpenAIServer() as srv:
        local = Target(srv.base_url, "ok", endpoint=Endpoint(srv.base_url, {"ok": None}, vllm=False, metrics=False))
        busy = Runner(save=lambda r: r).load(spec, local)
        monkeypatch.setattr(nvml, "_lib", lambda: None)  # the same machine, no GPU: the CPU path
        quiet = Runner(save=lambda r: r).load(spec, local)
    d = busy.extra.beside.disturbance
    assert _gpu(d) == {"gpus": [0], "gpu_others": 1, "gpu_others_gb": 7.0, "gpu_others_busy": 25.0}
    assert _gpu(quiet.extra.beside.disturbance) == dict.fromkeys(GPU_KEYS)  # no GPU: the CPU's part only
    v = verdict.compare_runs([quiet], [busy], "mean_e2el_ms", name="E2E", label_a="quiet", label_b="busy")
    assert v is not None and v.finding is None and v.disturbed is not None
    assert "other process on the GPU held 7.0 GB" in str(v.said)


WORKER = OTHER + 7  # a pid standing for a run's process that ended before the watch's end reading


def test_a_gpu_of_a_process_that_ended_before_the_end_reading_is_the_runs():
    """The naive worker computes on the GPU and exits before the run ends, so NVML lists it at neither end: the
    watch is told it was the run's (its pid), and NVML's samples over the span show its GPU; the others there are
    read as beside a vLLM run."""
    nv = FakeNvml({0: {OTHER: 5 * GB}, 1: {OTHER + 1: 70 * GB}}, {0: {WORKER: 60.0, OTHER: 35.0}, 1: {OTHER + 1: 99.0}})
    watch = disturbance.Watch([], nv=nv)
    watch.start()
    assert set(watch.stop().to_dict()) == CPU_KEYS  # not told: no GPU of the run's (the naive run's reading until now)
    watch.start()
    d = watch.stop(own=[WORKER])
    assert _gpu(d) == {"gpus": [0], "gpu_others": 1, "gpu_others_gb": 5.0, "gpu_others_busy": 35.0}
    assert disturbance.disturbed(_notes(d))


def test_a_driver_without_samples_finds_the_ended_process_gpu_by_the_device_it_named():
    nv = FakeNvml({0: {OTHER: 3 * GB}, 1: {}}, {0: None, 1: None})
    watch = disturbance.Watch([], nv=nv)
    watch.start()
    d = watch.stop(own=[WORKER], gpus=[0])
    assert _gpu(d) == {"gpus": [0], "gpu_others": 1, "gpu_others_gb": 3.0, "gpu_others_busy": None}
    assert disturbance.disturbed(_notes(d))


@pytest.mark.slow
def test_a_naive_run_records_the_gpu_beside_its_worker(monkeypatch, tiny_random_dir):  # noqa: F811 - the fixture
    """The naive baseline through the Runner, a real (tiny, random-weight) worker, NVML answered by the fake at
    engine.observe.nvml's pynvml: its samples show the worker and another process computing on GPU 0, and the saved
    naive run's disturbance part has the other process, as a vLLM run's would."""
    from engine.measure.baseline.protocol import NaiveSpec
    from engine.measure.progress import Progress
    from engine.runs import Runner

    nv = FakeNvml({0: {OTHER: 6 * GB}}, {0: {OTHER: 30.0}})

    class Worker(Progress):
        def on_worker(self, pid: int) -> None:  # the worker computes on GPU 0 from its start, as NVML would sample
            nv.busy[0][pid] = 70.0

    monkeypatch.setattr(nvml, "_lib", lambda: nv)
    run = Runner(save=lambda r: r, progress=Worker()).naive(
        NaiveSpec(model_path=str(tiny_random_dir), prompts=["hi", "hello"], max_new_tokens=4, random_weights=True,
                  warmup=False))
    d = run.extra.beside.disturbance
    assert _gpu(d) == {"gpus": [0], "gpu_others": 1, "gpu_others_gb": 6.0, "gpu_others_busy": 30.0}
    assert disturbance.disturbed(run.extra)
    assert values(disturbance.said(_notes(d)))["what"] == {"n": 1, "gb": "6.0", "share": "30 %"}  # its GPU part
