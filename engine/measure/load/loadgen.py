"""The load generator's entry points: `run_load` (one load test) and `run_level` (one sweep level).
See docs/measuring.md#load-generator."""
from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterable

import aiohttp

from engine.measure.judge import lateness, stats
from engine.measure.load.clients import run_sharded
from engine.measure.load.drive import Job, Outcome, counter, drive, measured_job, run_loop, shift
from engine.measure.progress import Progress, RunPlan, Totals, notify
from engine.measure.load.request import Requester, clock
from engine.measure.load.spec import LoadSpec
from engine.messages import say
from engine.results.records import Load, LoadClient, Notes, RequestRecord, RunResult

# In-flight streams one client loop is trusted with before `workers="auto"` adds a process.
PER_LOOP_CONCURRENCY = 64


def auto_workers(spec: LoadSpec) -> int:
    """Client processes for a spec: its `workers` if set, else one loop per PER_LOOP_CONCURRENCY
    streams, capped at a quarter of the cores (the server needs the rest)."""
    if spec.shape == "sequential":
        return 1
    if spec.workers > 0:
        return max(1, min(spec.workers, spec.in_flight()))
    cap = max(1, (os.cpu_count() or 1) // 4)
    return max(1, min(cap, math.ceil(spec.in_flight() / PER_LOOP_CONCURRENCY)))


def client_name() -> str:
    """The measuring client as a run records it, e.g. 'aiohttp 3.14.5 + uvloop'."""
    try:
        import uvloop  # type: ignore[import-not-found]  # noqa: F401
        return f"aiohttp {aiohttp.__version__} + uvloop"
    except ImportError:
        return f"aiohttp {aiohttp.__version__} + asyncio"


def _run_single(spec: LoadSpec, observer: Progress, cancel: threading.Event, totals: Totals,
                on_measure: Callable[[], float | None] | None = None) -> Outcome:
    """Warm-up and measured part in one event loop on this thread, on the same connections; `on_measure`
    runs between them."""
    sent = lambda r: notify(observer.on_request_sent, r)  # noqa: E731
    recs: list[RequestRecord] = []

    async def main() -> Outcome:
        async with Requester(spec) as req:

            def sink(r: RequestRecord) -> None:
                recs.append(r)
                if not r.warmup:
                    totals.add(r, clock() - req.t0)
                notify(observer.on_request_done, r, totals)

            tw = req.t0 = clock()
            if spec.warmup > 0:
                job = Job(workers=min(spec.in_flight(), spec.warmup), take=counter(spec.warmup))
                await drive(req, job, True, sink, cancel.is_set, sent)
            origin = await asyncio.to_thread(on_measure) if on_measure is not None else None
            t0 = req.t0 = origin if isinstance(origin, float) else clock()
            notify(observer.on_clock, time.time() + (t0 - clock()))
            while (wait := t0 - clock()) > 0:  # a shared origin a moment ahead (uvloop may wake early)
                await asyncio.sleep(wait)
            shift(recs, tw - t0)
            req.waited = 0
            job = measured_job(spec, counter(spec.units), min(spec.in_flight(), spec.units))
            await drive(req, job, False, sink, cancel.is_set, sent)
            return Outcome(recs, t0, clock(), connections=req.budget, waits=req.waited)

    return run_loop(main)


def _count_fallback(records: Iterable[RequestRecord], count_tokens: Callable[[str], int] | None) -> None:
    """Where the server sent no usage, re-count with the tokenizer when one was given."""
    if count_tokens is None:
        return
    for r in records:
        if r.tokens_source == "chunks":
            r.output_tokens = int(count_tokens(r.output_text))
            r.prompt_tokens = r.prompt_tokens or int(count_tokens(r.prompt))
            r.tokens_source = "tokenizer"


def run_load(spec: LoadSpec, observer: Progress | None = None, cancel: threading.Event | None = None,
             on_measure: Callable[[], float | None] | None = None) -> RunResult:
    """Run one load test and return its RunResult (kind "vllm", summary from stats.summarize).
    `on_measure` is called once the warm-up is over, right before the measured part starts (nothing in
    flight then): where engine.runs reads the server's own token counter. It may return the moment
    (perf_counter, a little ahead) the measured part starts: two runs given the same one share one
    clock (engine.runs.Runner.side_by_side).

    Blocking; call it from a worker thread to keep a UI responsive. Setting `cancel` stops sending,
    cancels the requests in flight (recorded with error "cancelled") and returns what completed.
    Warm-up records are kept (warmup=True, negative times) and left out of the summary."""
    observer = observer or Progress()
    cancel = cancel or threading.Event()
    shards = auto_workers(spec)
    plan = RunPlan(label=spec.label, shape=spec.shape, num_requests=spec.n, warmup=spec.warmup,
                   concurrency=spec.in_flight(), workers=shards, url=spec.url, model=spec.model,
                   arrivals=str(spec.arrivals_said()) if spec.shape == "poisson" else
                   "on the trace's clock" if spec.shape == "trace" else "")
    notify(observer.on_start, plan)
    totals = Totals(total=spec.n)
    if shards == 1:
        out = _run_single(spec, observer, cancel, totals, on_measure)
    else:
        out = run_sharded(spec, shards, observer, cancel, totals, on_measure)
    started_at = time.time() - (clock() - out.t0)
    records = sorted(out.records, key=lambda r: (not r.warmup, r.index))
    _count_fallback(records, spec.count_tokens)
    duration = max(0.0, out.end - out.t0)
    client = LoadClient(name=client_name(), workers=shards, errors=out.errors, planned_requests=spec.n,
                        connections=out.connections, waits=out.waits)
    extra = Notes(cancelled=cancel.is_set(), load_client=client, lateness=lateness.notes(records))
    result = RunResult(
        kind="vllm", scenario=spec.scenario or spec.shape, label=spec.label or f"vLLM {spec.shape}",
        records=records, duration=duration, started_at=started_at, model=spec.model,
        load=Load.from_dict(spec.as_dict()),
        extra=extra,
    )
    result.summary = stats.summarize(records, duration)
    notify(observer.on_complete, result)
    return result


def run_level(base_spec: LoadSpec, level: int, observer: Progress | None = None,
              cancel: threading.Event | None = None, rounds: int = 2,
              on_measure: Callable[[], None] | None = None) -> RunResult:
    """One level of a concurrency sweep: `level` in flight, max(base num_requests, level x rounds)
    requests, and a warm-up of at least one full batch (a GPU pays a one-off cost the first time it
    sees a batch size). The run is marked with its level (extra.sweep_level)."""
    spec = dataclasses.replace(
        base_spec, shape="concurrency", concurrency=level,
        num_requests=max(base_spec.num_requests or 0, level * max(1, rounds)),
        warmup=max(base_spec.warmup, level), scenario=base_spec.scenario or "sweep",
        label=say("concurrency {level}", level=level))
    result = run_load(spec, observer, cancel, on_measure)
    result.extra.sweep_level = level
    return result
