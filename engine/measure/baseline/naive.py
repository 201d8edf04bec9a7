"""The naive transformers baseline (sequential or static batch): the parent's side, which runs the worker process
(naive_worker.py), watches its memory and builds the run. See docs/measuring.md#naive-baseline."""
from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.measure.baseline.protocol import ERROR_KINDS, NaiveSpec, WorkerFailed, check_model_folder, heard
from engine.measure.judge.ceiling import model_bytes
from engine.measure.judge.stats import summarize
from engine.measure.progress import Progress, RunPlan, Totals, notify
from engine.messages import mark, say
from engine.observe import nvml
from engine.observe import hardware
from engine.results.records import (Load, MemoryAt, NaiveWorker, Notes, RequestRecord, RunResult, ServerNotes,
                                    WorkerMemory)

TERMINATE_GRACE_S = 5.0
WORKER_MODULE = "engine.measure.baseline.naive_worker"


# -- memory as seen from outside the worker ----------------------------------------------------
def _ram_used() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().used)
    except Exception:
        return None


def _pick_gpu(gpus: list[dict], device: dict) -> dict | None:
    """The NVML entry for the worker's CUDA device: by UUID, else by index."""
    if not gpus:
        return None
    uuid = (device.get("uuid") or "").lower().removeprefix("gpu-")
    if uuid:
        for g in gpus:
            if g["uuid"].lower().removeprefix("gpu-") == uuid:
                return g
    idx = device.get("nvml_index", device.get("index"))
    return next((g for g in gpus if g["index"] == idx), None)


def worker_gpu(result: RunResult) -> list[int]:
    """The NVML index of the GPU a finished naive run's worker computed on ([] on a CPU, or where NVML does not
    list it): its device as the worker reported it, matched as the memory readings match it."""
    dev = (result.hardware or {}).get("naive_device") or {}
    if dev.get("type") != "cuda":
        return []
    g = _pick_gpu(nvml.devices(), dev)
    return [g["index"]] if g else []


# -- the run ------------------------------------------------------------------------------------
@dataclass
class _State:
    records: list[RequestRecord] = field(default_factory=list)
    started_at: float | None = None
    loaded: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    done: dict[str, Any] | None = None
    warmup_s: float | None = None


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])  # the repository root: engine/measure/baseline/naive.py
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never reach for the network
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return env


def _stop(proc: subprocess.Popen, grace_s: float = TERMINATE_GRACE_S) -> None:
    """terminate (SIGTERM), then kill after the grace period; always reaps the child."""
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        pass


def run_naive(spec: NaiveSpec, observer: Progress | None = None, cancel: threading.Event | None = None,
              python: str | None = None) -> RunResult:
    """Run the naive baseline in a worker process and return its RunResult (blocking; call it from a
    background thread). ``cancel`` stops the worker (terminate, then kill) and returns the requests
    finished so far, with ``extra["cancelled"] = True``. Errors a user can cause raise a NaiveError
    (a LabError) whose ``result`` keeps the completed requests. ``python`` is the interpreter that
    has torch and transformers (default: this one)."""
    spec.validate()
    folder = check_model_folder(spec)
    observer = observer or Progress()
    cancel = cancel or threading.Event()
    n = len(spec.prompts)
    t_begin = time.time()

    before = {"gpus": nvml.devices(), "ram_used": _ram_used()}
    notify(observer.on_stage, say("starting worker"))
    payload = asdict(spec)
    payload["model_path"] = str(folder)
    try:
        proc = subprocess.Popen(
            [python or sys.executable, "-m", WORKER_MODULE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=_worker_env(), close_fds=True,
        )
    except OSError as e:
        raise WorkerFailed(say("Could not start the naive worker ({error}): check that Python at {python} exists.",
                               error=str(e), python=python or sys.executable)) from e
    notify(observer.on_worker, proc.pid)
    # The spec goes in as one line; stdin then stays open: its EOF tells the worker that we are gone.
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        proc.stdin.write((json.dumps(payload) + "\n").encode())
        proc.stdin.flush()
    except OSError:
        pass

    events: queue.Queue = queue.Queue()
    log_tail: collections.deque[str] = collections.deque(maxlen=200)

    def read_events() -> None:
        for raw in proc.stdout:  # type: ignore[union-attr]
            try:
                events.put(json.loads(raw))
            except ValueError:
                log_tail.append(raw.decode(errors="replace").rstrip())
        events.put(None)

    def read_log() -> None:
        for raw in proc.stderr:  # type: ignore[union-attr]
            log_tail.append(raw.decode(errors="replace").rstrip())

    readers = [threading.Thread(target=read_events, daemon=True, name="naive-events"),
               threading.Thread(target=read_log, daemon=True, name="naive-log")]
    for t in readers:
        t.start()

    st = _State()
    peak = {"rss": 0, "device": 0}
    cancelled = stopped_after_eof = False
    last_sample = 0.0

    def sample() -> None:
        try:
            import psutil

            peak["rss"] = max(peak["rss"], psutil.Process(proc.pid).memory_info().rss)
        except Exception:
            pass
        if st.loaded.get("device", {}).get("type") == "cuda":
            for g in nvml.devices():
                if proc.pid in g["procs"]:
                    peak["device"] = max(peak["device"], g["procs"][proc.pid])

    def handle(ev: dict) -> None:
        kind = ev.get("ev")
        if kind == "stage":
            if not cancelled:  # stages still in the pipe after a cancel would read as progress
                notify(observer.on_stage, heard(ev["text"], ev.get("said")))
        elif kind == "device":
            st.loaded.setdefault("device", ev["device"])
            st.loaded.setdefault("dtype", ev.get("dtype"))
        elif kind == "loaded":
            st.loaded.update(ev)
        elif kind == "memory":
            st.memory[ev["point"]] = ev["value"]
        elif kind == "warmup":
            st.warmup_s = ev.get("seconds")
        elif kind == "started":
            st.started_at = ev["started_at"]
            notify(observer.on_start, RunPlan(
                label=spec.default_label(), shape=spec.mode, num_requests=n, warmup=0, workers=1, url="",
                concurrency=n if spec.mode != "sequential" else 1, model=spec.display_name()))
        elif kind == "record":
            rec = RequestRecord.from_dict(ev["record"])
            st.records.append(rec)
            notify(observer.on_request_done, rec, _totals(st.records, n, ev.get("elapsed")))
        elif kind == "error":
            st.error = ev
        elif kind == "done":
            st.done = ev

    try:
        while True:
            if cancel.is_set() and not cancelled:
                cancelled = True
                notify(observer.on_stage, say("cancelling: stopping the worker"))
                _stop(proc)
            try:
                ev = events.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() - last_sample > 0.5:
                    last_sample = time.monotonic()
                    sample()
                continue
            if ev is None:
                break
            handle(ev)
        # stdout closed: the worker is exiting (or gone). Give it a moment, then make sure.
        try:
            proc.wait(timeout=TERMINATE_GRACE_S * 2)
        except subprocess.TimeoutExpired:
            _stop(proc)
            stopped_after_eof = True
    except BaseException:
        _stop(proc, grace_s=1.0)
        raise
    finally:
        for s in (proc.stdin, proc.stdout):
            try:
                s.close()  # type: ignore[union-attr]
            except Exception:
                pass
        for t in readers:
            t.join(timeout=2.0)

    after = _after_exit(before, st.loaded.get("device", {}))
    result = _build_result(spec, st, before, after, peak, proc, cancelled, t_begin, list(log_tail))

    if st.error and not cancelled:
        err_cls = ERROR_KINDS.get(st.error.get("kind", "other"), WorkerFailed)
        err = err_cls(heard(st.error.get("message"), st.error.get("said"))
                      or say("The naive worker failed: see its log."))
        err.result = result
        raise err
    # A worker that said "done" has measured everything; one we had to stop because its teardown outlived the grace
    # (a loaded machine: CI saw it) has not failed.
    if not cancelled and (st.done is None or (proc.returncode != 0 and not stopped_after_eof)):
        err = WorkerFailed(_crash_sentence(proc.returncode, list(log_tail)))
        err.result = result
        raise err
    notify(observer.on_stage, mark("cancelled") if cancelled else mark("done"))
    notify(observer.on_complete, result)
    return result


def _totals(records: list[RequestRecord], total: int, elapsed: float | None) -> Totals:
    ok = [r for r in records if r.ok]
    return Totals(total=total, done=len(records), ok=len(ok), failed=len(records) - len(ok),
                  output_tokens=sum(r.output_tokens for r in ok), elapsed_s=elapsed or 0.0)


def _crash_sentence(rc: int | None, tail: list[str]) -> str:
    last = next((ln.strip() for ln in reversed(tail) if ln.strip()), "")
    if rc is not None and rc < 0:
        sig = -rc
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGKILL:
            return say("The naive worker was killed ({signal}), most likely because the machine ran out of RAM: "
                       "use a smaller model, fewer prompts or fewer new tokens.", signal=name)
        return say("The naive worker died from {signal}: see the log line '{line}' and run it again.", signal=name,
                   line=last[-200:])
    return say("The naive worker exited unexpectedly (exit code {rc}): {line}; fix the cause and run it again.",
               rc=rc, line=last[-300:] or say("no log output"))


def _after_exit(before: dict, device: dict) -> dict[str, Any]:
    """Device / RAM use once the worker is gone. NVML can lag the process exit by a moment, so on a
    GPU poll briefly until the used memory stops falling."""
    gpus = nvml.devices()
    if device.get("type") == "cuda" and gpus:
        g_before = _pick_gpu(before["gpus"], device)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            g = _pick_gpu(gpus, device)
            if g is None or g_before is None or g["used"] <= g_before["used"] + (64 << 20):
                break
            time.sleep(0.25)
            gpus = nvml.devices()
    return {"gpus": gpus, "ram_used": _ram_used()}


def _at(snapshot: Any) -> MemoryAt | None:
    """The worker's memory at one point, as it reported it (torch_device.memory_snapshot); None: not reached."""
    return MemoryAt.from_dict(snapshot) if isinstance(snapshot, dict) else None


def _outside(ram_used: int | None, gpu: dict | None) -> MemoryAt:
    """The machine's memory seen from outside the worker: the system RAM used, and its GPU's (NVML) when on one."""
    return MemoryAt(ram_used=ram_used, device_used=gpu["used"] if gpu else None,
                    device_total=gpu["total"] if gpu else None)


def _build_result(spec: NaiveSpec, st: _State, before: dict, after: dict, peak: dict, proc: subprocess.Popen,
                  cancelled: bool, t_begin: float, log_tail: list[str]) -> RunResult:
    records = sorted(st.records, key=lambda r: r.index)
    ends = [r.end_time for r in records if r.end_time is not None]
    duration = max(ends) if ends else 0.0
    dev = st.loaded.get("device", {})
    on_cuda = dev.get("type") == "cuda"

    g_before, g_after = _pick_gpu(before["gpus"], dev), _pick_gpu(after["gpus"], dev)
    # the worker's own peak: the kernel's high-water mark it reported (exact), else the parent's samples
    reported = [st.memory[p].get("peak_rss") or 0 for p in ("after_load", "after_run", "after_cleanup")
                if isinstance(st.memory.get(p), dict)]
    memory = WorkerMemory(
        unit="bytes", device=dev.get("name"),
        inside="torch.cuda.memory_allocated/reserved + mem_get_info" if on_cuda else "worker RSS (psutil)",
        outside="NVML device used memory" if on_cuda else "system RAM used (psutil)",
        after_load=_at(st.memory.get("after_load")), after_run=_at(st.memory.get("after_run")),
        after_cleanup=_at(st.memory.get("after_cleanup")),
        before=_outside(before["ram_used"], g_before), after_exit=_outside(after["ram_used"], g_after),
        # ~0: the memory really came back
        left_after_exit=g_after["used"] - g_before["used"] if g_before and g_after else None,
        worker_peak_rss=max([peak["rss"], *reported]) or None,
        # reaped: the operating system has taken back everything the process held (its RSS, its CUDA context)
        worker_exited=proc.returncode is not None,
        worker_peak_device=peak["device"] or None)  # NVML per-process; None where NVML can't see pids

    notes = []
    if cancelled:
        notes.append(f"cancelled after {len(records)} of {len(spec.prompts)} requests")
    if spec.random_weights:
        notes.append("random weights: the text is meaningless, only speed and memory count")
    worker = NaiveWorker(  # the run's Notes.naive (what the worker reported is kept aside where of another type)
        memory=memory, load_s=st.loaded.get("load_s"), params=st.loaded.get("params"),
        dtype=st.loaded.get("dtype") or spec.dtype, dtype_reason=st.loaded.get("dtype_reason"),
        device=dev.get("name") or spec.device, device_name=dev.get("description"), warmup_s=st.warmup_s,
        worker_pid=proc.pid, worker_exit_code=proc.returncode, notes=notes,
        timing=("sequential: each request's clock starts when its own generate() starts (the lab's "
                "measure); requests ran one after another" if spec.mode == "sequential" else
                "static batch: every request is sent at 0 and answered when the whole batch ends; "
                "TTFT is the batch's first decoding step; chunk_times stop where each answer ended"),
        error=st.error.get("message") if st.error else None, log_tail=log_tail[-40:] if st.error else [])

    config = {
        "model": spec.display_name(),
        "model_path": str(spec.model_path),
        "mode": spec.mode,
        "dtype": worker.dtype,
        "device": worker.device,
        "max_new_tokens": spec.max_new_tokens,
        "temperature": spec.temperature,
        "do_sample": spec.temperature > 0,
        "sampling": st.loaded.get("sampling"),
        "seed": spec.seed,
        "random_weights": spec.random_weights,
        "warmup": spec.warmup,
        "prompts": len(spec.prompts),
        "chat_template": True,
    }
    load = Load(shape=spec.mode, num_requests=len(spec.prompts), max_tokens=spec.max_new_tokens,
                concurrency=1 if spec.mode == "sequential" else len(spec.prompts))

    result = RunResult(
        kind=spec.kind, scenario=spec.default_scenario(), label=spec.default_label(), records=records,
        duration=duration, started_at=st.started_at or t_begin, model=spec.display_name(), config=config,
        load=load, extra=Notes(cancelled=cancelled, server=ServerNotes(placeholder_text=bool(spec.random_weights)),
                               naive=worker),
    )
    try:
        result.hardware = dict(hardware.describe())
        result.versions = dict(hardware.versions())
    except Exception:
        pass
    if st.loaded.get("versions"):
        result.versions.update(st.loaded["versions"])  # what the worker actually imported
    if dev:
        result.hardware["naive_device"] = dev
    # what each decode step read, for the run's ceiling; None when the model's files cannot say (model_bytes reads
    # them defensively). No blanket except here: it once hid a TypeError that dropped every naive run's ceiling.
    size = model_bytes(str(spec.model_path), worker.dtype, params=worker.params)
    if size:
        result.extra.model_size.weights, result.extra.model_size.kv_per_token = size.weights, size.kv_per_token
    result.summary = summarize(records, duration)
    return result
