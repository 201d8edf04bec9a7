"""Background jobs with progress and cancel, in threads the engine owns, shared by every browser session.
See docs/internals.md#jobs."""
from __future__ import annotations

import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.errors import LabError, ServerBusy
from engine.measure.progress import Progress, RunPlan, Totals
from engine.messages import Message, mark, say
from engine.results.records import RequestRecord, RunResult

# A job's status, also its last stage when it ends: phrases a page shows (mark), equal to their English.
RUNNING, DONE, FAILED, CANCELLED = mark("running"), mark("done"), mark("failed"), mark("cancelled")


@dataclass
class Job(Progress):
    kind: str  # "load" | "naive" | "tuning" | "sweep" | ...
    label: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    status: str = RUNNING
    stage: str = mark("queued")
    done: int = 0
    total: int = 0
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    result: Any = None
    error: str | None = None
    records: list = field(default_factory=list)  # requests finished so far (for live charts)
    in_flight: dict = field(default_factory=dict)  # index -> record sent but not finished
    run_start: float | None = None  # epoch s the measured part began (timeline's zero)
    worker_pid: int | None = None  # the naive baseline's worker while it lives (memory charts)
    steps: bool = False  # a run of several: done/total count levels or configurations (on_step)
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    # two runs measured at once (Runner.side_by_side): each side's own live records, by name ("A", "B")
    sides: dict = field(default_factory=dict)
    parent: "Job | None" = field(default=None, repr=False)
    scenario: str = ""  # the run's scenario (a load test's): which page's job it is
    # A load test's warm-up (not counted): its requests and those finished so far; `warming` until the measured
    # part's clock starts, so a live view can tell the warm-up from the run it measures
    warmup_total: int = 0
    warmup_done: int = 0
    warming: bool = False

    @property
    def active(self) -> bool:
        return self.status == RUNNING

    @property
    def seen(self) -> tuple:
        """What a still view of this job shows changes with (a page watches it once the job ended): which job,
        and its status, stage, error and end, which `_run` sets one after another."""
        return self.id, self.status, self.stage, self.error, self.ended_at

    def error_shown(self, within_s: float | None = None) -> bool:
        """Whether a view shows this job's error: it failed, and (given `within_s`) ended less than that ago. A still
        page watches it beside `seen`, so the error leaves when its time is up, not at the page's next rerun."""
        return bool(self.error) and (within_s is None or (
            self.ended_at is not None and time.time() - self.ended_at < within_s))

    @property
    def progress(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    # -- the progress protocol (engine.measure.progress.Progress) ------------------------------
    def on_start(self, plan: RunPlan) -> None:
        """A measured run begins: the live view starts afresh (a sweep's next level)."""
        self.records, self.in_flight = [], {}
        self.run_start = time.time()
        self.warmup_total, self.warmup_done = plan.warmup or 0, 0
        self.warming = self.warmup_total > 0  # until on_clock: the measured part begins
        if not self.steps:
            self.total, self.done = plan.total or self.total, 0
        if self.parent is not None:
            self.label = plan.label or self.label  # the side's server, as its run will be named
            self.parent._count_sides()

    def side(self, name: str) -> "Job":
        """One side of a pair: a Job of its own (records, in flight, result) kept in `sides`, whose
        requests count in this job's done/total."""
        self.sides[name] = Job(kind=self.kind, label=name, cancel=self.cancel, parent=self)
        return self.sides[name]

    def _count_sides(self) -> None:
        sides = list(self.sides.values())
        self.done, self.total = sum(s.done for s in sides), sum(s.total for s in sides)

    def on_complete(self, result) -> None:
        if self.parent is not None:
            self.result = result  # a side's run, readable while the other side still measures

    def on_clock(self, started_at: float) -> None:
        self.run_start = started_at
        self.warming = False

    def on_step(self, done: int, total: int, text: str) -> None:
        self.steps = True  # progress now counts runs (levels, configurations), not requests
        self.done, self.total, self.stage = done, total, text

    def on_stage(self, text: str) -> None:
        self.stage = text

    def on_worker(self, pid: int) -> None:
        self.worker_pid = pid

    def on_request_sent(self, record: RequestRecord) -> None:
        if not record.warmup:
            self.in_flight[record.index] = record

    def on_request_done(self, record: RequestRecord, totals: Totals | None = None) -> None:
        if record.warmup:  # its index is the warm-up's own: never a measured request's
            self.warmup_done += 1
            return
        self.in_flight.pop(record.index, None)
        self.records.append(record)
        if not self.steps:
            self.done = len(self.records)
        if self.parent is not None:
            self.parent._count_sides()

    def live_records(self) -> list[RequestRecord]:
        """Finished and in-flight requests, for a timeline drawn while the run goes on."""
        return list(self.records) + list(self.in_flight.values())

    def live_run(self) -> tuple[RunResult, float]:
        """A running load test's requests so far (finished and in flight) as a run for the charts, and
        the seconds since it began sending (where the timeline's in-flight bars end)."""
        partial = RunResult(kind="vllm", scenario="live", label=self.label, records=self.live_records(),
                            duration=0, started_at=self.started_at)
        return partial, time.time() - (self.run_start or self.started_at)

    def live_pair(self) -> tuple[list[RunResult], float]:
        """A side-by-side job's two sides so far (finished and in-flight requests, or each side's run once
        it ended) as runs for the charts, A first, and the seconds since their shared clock started."""
        runs = [side.result if isinstance(side.result, RunResult) else
                RunResult(kind="vllm", scenario="live", label=side.label, records=side.live_records(),
                          duration=0, started_at=side.run_start or self.started_at)
                for _, side in sorted(self.sides.items())]
        start = min((s.run_start for s in self.sides.values() if s.run_start), default=None)
        return runs, max(0.0, time.time() - start) if start else 0.0


class JobManager:
    """Runs jobs in threads. At most one job per `lane` at a time: heavy work ("gpu") is serialised so
    two viewers pressing Run cannot run two benchmarks against each other. Finished jobs are let go (their runs
    are in the history): all but the newest KEEP_FINISHED and the newest of each kind and scenario, which
    `latest` answers with."""

    KEEP_FINISHED = 32

    def __init__(self) -> None:
        self._jobs: list[Job] = []
        self._lanes: dict[str, Job] = {}
        self._lock = threading.Lock()

    def submit(self, kind: str, label: str, fn: Callable[[Job], Any], lane: str = "gpu", scenario: str = "") -> Job:
        with self._lock:
            busy = self._lanes.get(lane)
            if busy is not None and busy.active:
                raise ServerBusy(say("'{label}' is still running: wait for it to finish or cancel it first.",
                                     label=busy.label))
            job = Job(kind=kind, label=label, scenario=scenario)
            self._jobs.append(job)
            self._lanes[lane] = job
            self._prune()
        threading.Thread(target=self._run, args=(job, fn), daemon=True, name=f"job-{kind}-{job.id}").start()
        return job

    def _run(self, job: Job, fn: Callable[[Job], Any]) -> None:
        try:
            job.result = fn(job)
            job.status = CANCELLED if job.cancel.is_set() else DONE
        except LabError as e:
            job.error, job.status = _sentence(e), FAILED
        except Exception as e:  # unexpected: keep the job visible with the cause
            job.error = say("{kind}: {why}", kind=type(e).__name__, why=_sentence(e))
            job.status = FAILED
            traceback.print_exc()
        finally:
            job.ended_at = time.time()
            job.stage = job.status

    def _prune(self) -> None:
        """Under the lock: keep every running job, the newest finished ones, and each kind and scenario's newest."""
        newest = {(j.kind, j.scenario): j for j in self._jobs}  # the last of each wins
        keep = {id(j) for j in newest.values()}
        keep |= {id(j) for j in [j for j in self._jobs if not j.active][-self.KEEP_FINISHED:]}
        self._jobs = [j for j in self._jobs if j.active or id(j) in keep]

    def get(self, job_id: str | None) -> Job | None:
        with self._lock:
            return next((j for j in self._jobs if j.id == job_id), None)

    def latest(self, kind: str | None = None, scenario: str | tuple[str, ...] = "") -> Job | None:
        """The newest job of `kind` whose scenario starts with `scenario` (one prefix or several)."""
        with self._lock:
            for j in reversed(self._jobs):
                if (kind is None or j.kind == kind) and j.scenario.startswith(scenario):
                    return j
        return None

    def active(self) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs if j.active]

    def cancel(self, job_id: str) -> None:
        job = self.get(job_id)
        if job:
            job.cancel.set()
            job.stage = mark("cancelling")


def _sentence(e: BaseException) -> str:
    """str(e), kept as the Message it was raised with (so a page can say it in the viewer's language)."""
    text = str(e)
    return e.args[0] if len(e.args) == 1 and isinstance(e.args[0], Message) and e.args[0] == text else text
