"""Driving one event loop: the arrival shapes, the warm-up, cancellation and the loop itself.
See docs/measuring.md#load-generator."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.measure.load import arrivals
from engine.measure.load.request import Requester, clock
from engine.measure.load.spec import RATE_SHAPES, LoadSpec
from engine.results.records import RequestRecord


@dataclass
class Job:
    """The part of a run one loop sends: a closed loop (`workers` pulling unit indices from `take`, worker k
    starting `starts[k]` s after the phase's start: a ramp-up) or an open loop (`schedule` of (unit index,
    planned offset s), at most `cap` of them in flight). A unit is one request, or one conversation of a
    multi-turn chat."""

    workers: int = 0
    take: Callable[[], int | None] | None = None
    schedule: list[tuple[int, float]] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    cap: int = 0  # an open loop's most requests in flight (its share of LoadSpec.max_in_flight); 0: no cap


@dataclass(frozen=True)
class Turn:
    """One request of a unit: its record's index, its prompt (a chat's new user message) and answer length."""

    index: int
    prompt: str
    max_tokens: int | None
    conversation: int | None = None
    turn: int | None = None


@dataclass
class Outcome:
    """What one run's loop (or processes) gathered, for run_load to turn into a RunResult."""

    records: list[RequestRecord]
    t0: float  # perf_counter at the measured part's start
    end: float  # perf_counter when its last request finished
    errors: list[str] = field(default_factory=list)  # client processes that failed
    connections: int | None = None  # the fewest connections a client loop could hold (its open-file budget)
    waits: int = 0  # measured requests that waited for one of them


async def drive(req: Requester, job: Job, warmup: bool, sink: Callable[[RequestRecord], None],
                cancelled: Callable[[], bool], sent: Callable[[RequestRecord], None] | None = None) -> None:
    """Send the job's units, warm-up ones (short answers to other prompts) or measured ones; `sent`
    sees each record as it goes out, `sink` each finished one. A conversation's turns go one after another,
    each with the history so far. Returns when all are done or, once `cancelled()` turns true, after the
    in-flight ones were cancelled and recorded."""
    spec = req.spec
    plan = units_for(spec, warmup)
    think = 0.0 if warmup else spec.think_time_s

    async def one(u: int, planned: float | None = None, slot_wait: float | None = None) -> None:
        history: list[dict[str, str]] = []
        broken: str | None = None
        for k, turn in enumerate(plan[u]):
            if k and think > 0:
                await asyncio.sleep(think)
            if cancelled():
                return
            rec = RequestRecord(index=turn.index, prompt=turn.prompt, send_time=0.0, warmup=warmup,
                                conversation=turn.conversation, turn=turn.turn,
                                planned_time=planned if k == 0 else None, slot_wait=slot_wait if k == 0 else None)
            if broken is not None:  # its history would lack a reply: said, not sent
                rec.send_time = rec.end_time = clock() - req.t0
                rec.error = broken
                sink(rec)
                continue
            try:
                await req.run(rec, turn.max_tokens, on_sent=sent, history=history)
            finally:
                sink(rec)
            if not rec.ok:
                broken = f"not sent: turn {k + 1} of its conversation failed ({rec.error})"
            history += [{"role": "user", "content": turn.prompt}, {"role": "assistant", "content": rec.output_text}]

    async def worker(k: int) -> None:
        start = job.starts[k] if k < len(job.starts) else 0.0
        while (delay := req.t0 + start - clock()) > 0 and not cancelled():  # a ramp-up's later workers
            await asyncio.sleep(min(delay, 0.05))
        while not cancelled() and (u := job.take()) is not None:  # type: ignore[misc]
            await one(u)

    slots = asyncio.Semaphore(job.cap) if job.cap else None

    async def capped(u: int, offset: float) -> None:
        """An arrival past the cap waits for a request to end (vllm bench serve's --max-concurrency): its wait
        is the record's slot_wait, so the client is not counted late for it."""
        assert slots is not None
        arrived = clock()
        async with slots:
            await one(u, offset, clock() - arrived)

    async def open_loop() -> None:
        tasks = []
        for u, offset in job.schedule:
            while (delay := req.t0 + offset - clock()) > 0:  # uvloop's timers may fire a little early
                await asyncio.sleep(delay)
            if cancelled():
                break
            tasks.append(asyncio.create_task(one(u, offset) if slots is None else capped(u, offset)))
        await asyncio.gather(*tasks, return_exceptions=True)

    if job.take is not None:
        main = [asyncio.create_task(worker(k)) for k in range(job.workers)]
    else:
        main = [asyncio.create_task(open_loop())]
    watch = asyncio.create_task(_watch_cancel(cancelled, main))
    await asyncio.gather(*main, return_exceptions=True)
    watch.cancel()


def units_for(spec: LoadSpec, warmup: bool) -> list[list[Turn]]:
    """What a phase sends, unit by unit: the warm-up's short single requests (other prompts, so the measured
    requests never hit warm-up blocks in the prefix cache), else each measured request, or each conversation's
    turns, with their record indices counted across conversations."""
    if warmup:
        first = [c[0] for c in spec.conversations] if spec.conversations else spec.prompts
        tokens = 16 if spec.max_tokens is None else min(spec.max_tokens, 16)
        return [[Turn(i, f"(warm-up {i}) " + first[i % len(first)], tokens)] for i in range(spec.warmup)]
    if spec.conversations:
        out, i = [], 0
        for c, turns in enumerate(spec.conversations):
            out.append([Turn(i + t, text, spec.tokens_for(i + t), c, t) for t, text in enumerate(turns)])
            i += len(turns)
        return out
    return [[Turn(i, spec.prompts[i % len(spec.prompts)], spec.tokens_for(i))] for i in range(spec.n)]


async def _watch_cancel(cancelled: Callable[[], bool], tasks: list[asyncio.Task]) -> None:
    while not cancelled():
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()


def counter(n: int) -> Callable[[], int | None]:
    """The next index below n, for the closed loop's workers of one process."""
    it = iter(range(n))
    return lambda: next(it, None)


def ramp_starts(top: int, start: int, ramp_up_s: float) -> list[float]:
    """When each of `top` closed-loop workers starts (s) so that the requests in flight rise linearly from
    `start` to `top` over `ramp_up_s`: the first `start` at once, worker k (0-based) at ramp × (k+1-start) /
    (top-start), the last at the ramp's end."""
    if ramp_up_s <= 0 or top <= start:
        return [0.0] * top
    return [0.0 if k < start else ramp_up_s * (k + 1 - start) / (top - start) for k in range(top)]


def schedule(spec: LoadSpec) -> list[float]:
    """The planned send offsets (s) of a rate-based spec's units (at a rate: seeded, arrivals.offsets; a trace:
    the file's)."""
    if spec.shape == "trace":
        return list(spec.offsets or [])
    return arrivals.offsets(spec.units, float(spec.rate or 1.0), spec.seed, spec.burstiness, spec.ramp_up_s,
                            spec.ramp_from, spec.arrival, spec.ramp_strategy, spec.ramp_start_rps)


def measured_job(spec: LoadSpec, take: Callable[[], int | None], workers: int, shard: int = 0,
                 shards: int = 1) -> Job:
    """The measured part for one loop: its share of the planned schedule, or `workers` pulling unit indices
    (under a ramp-up, this loop's workers start when the whole run's worker of the same rank would: process
    k holds global workers k, k + shards, ...)."""
    if spec.shape in RATE_SHAPES:
        offsets = schedule(spec)
        cap = spec.max_in_flight or 0  # each client process holds its share of the cap
        return Job(schedule=[(i, offsets[i]) for i in range(shard, spec.units, shards)],
                   cap=cap // shards + (shard < cap % shards) if cap else 0)
    starts: list[float] = []
    if spec.ramp_up_s > 0 and spec.shape == "concurrency":
        top = min(spec.in_flight(), spec.units)
        every = ramp_starts(top, min(top, int(spec.ramp_from or 1)), spec.ramp_up_s)
        starts = [every[j * shards + shard] for j in range(workers) if j * shards + shard < top]
    return Job(workers=workers, take=take, starts=starts)


def prompts_for(spec: LoadSpec, warmup: bool) -> list[str]:
    """Each request's prompt (a chat turn's new user message) by record index, for a phase."""
    return [t.prompt for unit in units_for(spec, warmup) for t in unit]


def shift(recs: Iterable[RequestRecord], dt: float) -> None:
    """Re-base records' times by dt seconds (warm-up records onto the measured run's clock)."""
    for r in recs:
        r.send_time += dt
        r.end_time = None if r.end_time is None else r.end_time + dt
        r.first_token_time = None if r.first_token_time is None else r.first_token_time + dt
        r.chunk_times = [t + dt for t in r.chunk_times]
        r.planned_time = None if r.planned_time is None else r.planned_time + dt


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
