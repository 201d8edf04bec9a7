"""Several client processes for one load test, each with its own event loop and connections, on the parent's
clock. See docs/measuring.md#load-generator."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import multiprocessing as mp
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.errors import LabError
from engine.measure.load.drive import Job, Outcome, drive, measured_job, prompts_for, run_loop, shift
from engine.measure.load.lifeline import die_with_parent
from engine.measure.progress import Progress, Totals, notify
from engine.measure.load.request import Requester, clock
from engine.measure.load.spec import LoadSpec
from engine.messages import Message, say
from engine.results.records import RequestRecord

log = logging.getLogger(__name__)


class LoadError(LabError):
    """The load generator itself could not run (its worker processes did not start)."""


def _shard_main(spec: LoadSpec, k: int, shards: int, sync: _ShardSync, parent_pid: int) -> None:
    """Entry point of client process k: its own loop and connections. It dies with the app (`parent_pid`): a
    client left behind would keep loading the server everyone is watching."""
    die_with_parent(parent_pid)
    try:
        run_loop(lambda: _shard(spec, k, shards, sync))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which owns the run
        why = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], Message) else str(e)
        sync.out_q.put(("error", k, say("client process {k} failed: {kind}: {why}", k=k, kind=type(e).__name__,
                                        why=why)))


def _shared_take(counter: Any, n: int) -> Callable[[], int | None]:
    """The next index below n from a counter shared by every client process."""

    def take() -> int | None:
        with counter.get_lock():
            i = counter.value
            if i >= n:
                return None
            counter.value = i + 1
            return i

    return take


async def _shard(spec: LoadSpec, k: int, shards: int, sync: _ShardSync) -> None:
    """Client process k: its share of the warm-up, then of the measured part, on the same connections
    (so the measured part never pays for opening them, as with `vllm bench serve`'s warm-ups). It
    reports "warmed" and "done" even when stopped early, so the parent never waits on a phase."""
    out_q, stop = sync.out_q, sync.stop
    sink = lambda r: out_q.put(("rec", dataclasses.asdict(r), clock()))  # noqa: E731
    sent = lambda r: out_q.put(("sent", r.index, r.send_time, r.warmup))  # noqa: E731
    async with Requester(spec) as req:
        out_q.put(("ready", k, clock()))
        if (tw := await _start_signal(sync.warm, sync.tw, stop)) is not None:
            req.t0 = tw
            job = Job(workers=sync.warm_shares[k], take=_shared_take(sync.warm_counter, spec.warmup))
            await drive(req, job, True, sink, stop.is_set, sent)
        out_q.put(("warmed", k, clock()))
        if (t0 := await _start_signal(sync.go, sync.t0, stop)) is not None:
            req.t0 = t0
            req.waited = 0
            job = measured_job(spec, _shared_take(sync.counter, spec.units), sync.shares[k], k, shards)
            await drive(req, job, False, sink, stop.is_set, sent)
            out_q.put(("client", k, req.budget, req.waited))
        out_q.put(("done", k, clock()))


async def _start_signal(event: Any, origin: Any, stop: Any) -> float | None:
    """Wait for the parent's `event`, then until the clock origin it set; None when stopping."""
    while not event.wait(0.05):  # nothing else runs in this loop meanwhile; blocking is fine
        pass
    if stop.is_set():
        return None
    t = origin.value
    while (wait := t - clock()) > 0:  # uvloop's timers can fire up to 1 ms early: no send before t
        await asyncio.sleep(wait)
    return t


@dataclass
class _ShardSync:
    """What the parent and its client processes share (multiprocessing objects, picklable to spawn)."""

    # ("ready"|"warmed"|"done", k, t) · ("rec", record dict, t) · ("sent", index, t, warmup) · ("error", k, text)
    # · ("client", k, connection budget, measured requests that waited for a connection)
    out_q: Any
    warm: Any  # Event: start the warm-up (its clock origin in tw)
    go: Any  # Event: start the measured part (its clock origin in t0)
    stop: Any  # Event: cancel, or the parent is leaving
    tw: Any
    t0: Any
    warm_counter: Any
    counter: Any
    warm_shares: list[int]  # requests in flight per process during the warm-up
    shares: list[int]  # ... and during the measured part


def run_sharded(spec: LoadSpec, shards: int, observer: Progress, cancel: threading.Event,
                totals: Totals, on_measure: Callable[[], float | None] | None = None) -> Outcome:
    """Warm-up and measured part spread over `shards` spawned processes, each on its own connections;
    `on_measure` runs between them (every process done warming up, none measuring yet) and may return
    the measured part's clock origin (see loadgen.run_load)."""
    ctx = mp.get_context("spawn")  # fork is unsafe from a threaded host such as Streamlit
    sync = _ShardSync(out_q=ctx.Queue(), warm=ctx.Event(), go=ctx.Event(), stop=ctx.Event(),
                      tw=ctx.Value("d", 0.0), t0=ctx.Value("d", 0.0), warm_counter=ctx.Value("q", 0),
                      counter=ctx.Value("q", 0), warm_shares=_split(min(spec.in_flight(), spec.warmup), shards),
                      shares=_split(min(spec.in_flight(), spec.units), shards))
    bare = dataclasses.replace(spec, count_tokens=None)  # callables need not pickle
    procs = [ctx.Process(target=_shard_main, name=f"serving-lab-loadgen-{k}", daemon=True,
                         args=(bare, k, shards, sync, os.getpid())) for k in range(shards)]
    with _main_hidden():
        for p in procs:
            p.start()
    budgets: dict[int, tuple[int, int]] = {}  # process -> (its connection budget, measured requests that waited)
    try:
        _await_ready(sync.out_q, procs)
        tw = clock() + 0.02
        sync.tw.value = tw
        sync.warm.set()
        warm, _, failed = _collect(spec, sync, procs, observer, cancel, totals, tw, True, {})
        origin = on_measure() if on_measure is not None else None
        t0 = origin if isinstance(origin, float) else clock() + 0.02
        notify(observer.on_clock, time.time() + (t0 - clock()))
        sync.t0.value = t0
        sync.go.set()
        recs, end, failed = _collect(spec, sync, procs, observer, cancel, totals, t0, False, failed, budgets)
        errors = list(failed.values())
    finally:
        sync.stop.set()
        sync.warm.set()
        sync.go.set()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
    if errors:
        log.warning("load generator: %s", "; ".join(errors))
    shift(warm, tw - t0)
    return Outcome(warm + recs, t0, end, errors, connections=min((b for b, _ in budgets.values()), default=None),
                   waits=sum(w for _, w in budgets.values()))


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Keep spawned children from re-running the caller's main script (they need nothing from it,
    and a script without an `if __name__ == "__main__"` guard would start the whole run again):
    multiprocessing only re-imports __main__ when it has a __spec__ name or a __file__."""
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__")
                             if main is not None and k in main.__dict__}
    try:
        if main is not None and "__spec__" in saved:
            main.__spec__ = None  # type: ignore[assignment]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def _await_ready(out_q: Any, procs: list[Any], timeout_s: float = 120.0) -> None:
    ready: set[int] = set()
    deadline = clock() + timeout_s
    while len(ready) < len(procs):
        try:
            msg = out_q.get(timeout=0.2)
        except queue.Empty:
            dead = [p for p in procs if not p.is_alive()]
            if dead or clock() > deadline:
                raise LoadError(say("the load generator's worker processes did not start ({ready}/{total} ready); "
                                    "try workers=1", ready=len(ready), total=len(procs))) from None
            continue
        if msg[0] == "error":
            raise LoadError(msg[2])
        ready.add(msg[1])


def _collect(spec: LoadSpec, sync: _ShardSync, procs: list[Any], observer: Progress, cancel: threading.Event,
             totals: Totals, t0: float, warmup: bool,
             failed: dict[int, str], budgets: dict[int, tuple[int, int]] | None = None,
             ) -> tuple[list[RequestRecord], float, dict[int, str]]:
    """Gather records of the warm-up or the measured part from the client processes until each
    reports the phase over ("warmed" or "done"), fails or dies. Warm-up records reach the observer
    but not the totals. `failed` (process -> why) holds those already lost; the returned one adds the new."""
    until, prompts = ("warmed" if warmup else "done"), prompts_for(spec, warmup)
    sent = lambda r: notify(observer.on_request_sent, r)  # noqa: E731
    recs: list[RequestRecord] = []
    failed = dict(failed)
    finished: set[int] = set(failed)
    gone_since: dict[int, float] = {}
    end = t0
    while len(finished) < len(procs):
        if cancel.is_set():
            sync.stop.set()
        try:
            msg = sync.out_q.get(timeout=0.1)
        except queue.Empty:
            for k, p in enumerate(procs):  # a process that died without a word: give its messages 1 s
                if k not in finished and not p.is_alive() and clock() - gone_since.setdefault(k, clock()) > 1.0:
                    failed[k] = say("client process {k} exited with code {code}", k=k, code=p.exitcode)
                    finished.add(k)
            continue
        if msg[0] == "sent":
            sent(RequestRecord(index=msg[1], prompt=prompts[msg[1]], send_time=msg[2], warmup=msg[3]))
        elif msg[0] == "rec":
            r = RequestRecord.from_dict(msg[1])
            recs.append(r)
            if not r.warmup:
                totals.add(r, msg[2] - t0)
            notify(observer.on_request_done, r, totals)
        elif msg[0] == until:
            finished.add(msg[1])
            end = max(end, msg[2])
        elif msg[0] == "error":
            failed[msg[1]] = msg[2]
            finished.add(msg[1])
        elif msg[0] == "client" and budgets is not None:
            budgets[msg[1]] = (msg[2], msg[3])
    return recs, (end if end > t0 else clock()), failed


def _split(total: int, parts: int) -> list[int]:
    """`total` in `parts` near-equal whole shares."""
    base, extra = divmod(total, parts)
    return [base + (k < extra) for k in range(parts)]
