"""Driving one event loop: the arrival shapes (a closed loop of N workers, or an open loop on a
seeded Poisson schedule), the warm-up's prompts and lengths, cancellation, and the loop itself
(uvloop when installed, the GC heap frozen meanwhile). Used alike by a run on the caller's thread
and by each client process (engine.measure.clients). See docs/architecture.md."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.measure.request import Requester, clock
from engine.measure.spec import LoadSpec
from engine.results.records import RequestRecord


@dataclass
class Job:
    """The part of a run one loop sends: a closed loop (`workers` pulling from `take`) or an open
    loop (`schedule` of (index, offset s))."""

    workers: int = 0
    take: Callable[[], int | None] | None = None
    schedule: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class Outcome:
    """What one run's loop (or processes) gathered, for run_load to turn into a RunResult."""

    records: list[RequestRecord]
    t0: float  # perf_counter at the measured part's start
    end: float  # perf_counter when its last request finished
    errors: list[str] = field(default_factory=list)  # client processes that failed


async def drive(req: Requester, job: Job, warmup: bool, sink: Callable[[RequestRecord], None],
                cancelled: Callable[[], bool], sent: Callable[[RequestRecord], None] | None = None) -> None:
    """Send the job's requests, warm-up ones (short answers to other prompts) or measured ones; `sent`
    sees each record as it goes out, `sink` each finished one. Returns when all are done or, once
    `cancelled()` turns true, after the in-flight ones were cancelled and recorded."""
    spec = req.spec
    prompts = prompts_for(spec, warmup)
    # Warm-up only has to put a batch of this size through the engine once; short answers do.
    max_tokens = (16 if spec.max_tokens is None else min(spec.max_tokens, 16)) if warmup else spec.max_tokens

    async def one(i: int) -> None:
        rec = RequestRecord(index=i, prompt=prompts[i], send_time=0.0, warmup=warmup)
        try:
            await req.run(rec, max_tokens, on_sent=sent)
        finally:
            sink(rec)

    async def worker() -> None:
        while not cancelled() and (i := job.take()) is not None:  # type: ignore[misc]
            await one(i)

    async def open_loop() -> None:
        tasks = []
        for i, offset in job.schedule:
            delay = req.t0 + offset - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if cancelled():
                break
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks, return_exceptions=True)

    if job.take is not None:
        main = [asyncio.create_task(worker()) for _ in range(job.workers)]
    else:
        main = [asyncio.create_task(open_loop())]
    watch = asyncio.create_task(_watch_cancel(cancelled, main))
    await asyncio.gather(*main, return_exceptions=True)
    watch.cancel()


async def _watch_cancel(cancelled: Callable[[], bool], tasks: list[asyncio.Task]) -> None:
    while not cancelled():
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()


def counter(n: int) -> Callable[[], int | None]:
    """The next index below n, for the closed loop's workers of one process."""
    it = iter(range(n))
    return lambda: next(it, None)


def poisson_offsets(n: int, rate: float, seed: int) -> list[float]:
    """Send offsets (s) of a seeded Poisson process, rescaled like `vllm bench serve` so the last
    request goes out at n/rate exactly (steadier throughput across seeds)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    if out and out[-1] > 0:
        k = (n / rate) / out[-1]
        out = [x * k for x in out]
    return out


def measured_job(spec: LoadSpec, take: Callable[[], int | None], workers: int, shard: int = 0,
                 shards: int = 1) -> Job:
    """The measured part for one loop: its share of the Poisson schedule, or `workers` pulling indices."""
    if spec.shape == "poisson":
        offsets = poisson_offsets(spec.n, float(spec.rate or 1.0), spec.seed)
        return Job(schedule=[(i, offsets[i]) for i in range(shard, spec.n, shards)])
    return Job(workers=workers, take=take)


def prompts_for(spec: LoadSpec, warmup: bool) -> list[str]:
    """One prompt per request of a phase, the spec's prompts cycled. The warm-up's start differently:
    the measured requests must not hit warm-up blocks in the prefix cache."""
    if warmup:
        return [f"(warm-up {i}) " + spec.prompts[i % len(spec.prompts)] for i in range(spec.warmup)]
    return [spec.prompts[i % len(spec.prompts)] for i in range(spec.n)]


def shift(recs: Iterable[RequestRecord], dt: float) -> None:
    """Re-base records' times by dt seconds (warm-up records onto the measured run's clock)."""
    for r in recs:
        r.send_time += dt
        r.end_time = None if r.end_time is None else r.end_time + dt
        r.first_token_time = None if r.first_token_time is None else r.first_token_time + dt
        r.chunk_times = [t + dt for t in r.chunk_times]


def run_loop(coro_fn: Callable[[], Any]) -> Any:
    """Run `coro_fn()` to completion in a new event loop (uvloop when installed) with the GC heap
    frozen, without leaking a loop policy to the caller's thread. Called from a thread that already
    runs a loop (a notebook, Playwright's sync API), the run gets a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro_fn)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = _run_here(coro_fn)
        except BaseException as e:  # handed back to the caller below
            box["error"] = e

    t = threading.Thread(target=target, name="loadgen-loop")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _run_here(coro_fn: Callable[[], Any]) -> Any:
    with _gc_frozen():
        try:
            import uvloop  # type: ignore[import-not-found]
        except ImportError:
            return asyncio.run(coro_fn())
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro_fn())


@contextlib.contextmanager
def _gc_frozen() -> Iterator[None]:
    """As `vllm bench serve` does (freeze_gc_heap): what exists before the run is left out of
    garbage collections during it, so a full collection of a big host process (Streamlit) cannot
    stall the loop mid-measurement. Undone afterwards; nothing is lost, only skipped meanwhile."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
