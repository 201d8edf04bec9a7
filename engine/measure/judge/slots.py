"""Batch slots, step by step: who held each slot at each decode step of a run (static vs continuous).
See docs/measuring.md#slots."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from engine.messages import Message, say
from engine.results.records import RequestRecord, RunResult

PROMPT, GENERATING, FINISHED, IDLE = 0, 1, 2, 3
STATES = (PROMPT, GENERATING, FINISHED, IDLE)
MAX_COLUMNS = 1000  # beyond this a column stands for several steps (a long load test stays drawable)
# shapes whose requests are all ready at the start (a closed loop): one sent later waited in the client
_ALL_READY = ("sequential", "concurrency", "burst")


@dataclass
class SlotGrid:
    """Rows = slots, columns = decode steps; `cells[row][col]` a state, `owner[row][col]` the request's
    index (None where idle)."""

    kind: str  # "static" | "continuous"
    cells: list[list[int]]
    owner: list[list[int | None]]
    step_s: float  # seconds one column stands for
    steps_per_column: int = 1
    idle_waiting: int = 0  # idle slot-steps between two requests while the next was ready, not sent (waste)
    how: str = ""  # how the steps were taken (a sentence)
    counts: dict[int, int] = field(default_factory=dict)
    requests: int = 0  # drawn (a request shorter than half a column has none)

    def __post_init__(self) -> None:
        self.counts = {s: sum(row.count(s) for row in self.cells) for s in STATES}
        self.requests = len({o for row in self.owner for o in row if o is not None})

    @property
    def refills(self) -> int:
        """Requests that took a slot another had left (0: each had its own slot from the start)."""
        return max(0, self.requests - self.slots)

    @property
    def slots(self) -> int:
        return len(self.cells)

    @property
    def steps(self) -> int:
        """Columns of the grid (decode steps, or groups of `steps_per_column`)."""
        return len(self.cells[0]) if self.cells else 0

    @property
    def used(self) -> int:
        """Slot-steps that produced a token."""
        return self.counts[GENERATING]

    @property
    def wasted(self) -> int:
        """Slot-steps spent on nothing: a finished answer held back, or a slot idle while a request waited."""
        return self.counts[FINISHED] + self.idle_waiting

    @property
    def useful_share(self) -> float:
        """Of the slot-steps the batch spent decoding or wasted, the share that produced a token."""
        spent = self.used + self.wasted
        return self.used / spent if spent else 0.0

    @property
    def said(self) -> Message:
        return say("{used} of {spent} decode slot-steps produced a token ({share}); {wasted} were wasted.",
                   used=self.used, spent=self.used + self.wasted, share=f"{self.useful_share:.0%}",
                   wasted=self.wasted)


def occupancy(run: RunResult) -> SlotGrid | Message:
    """The run's slots step by step, or the sentence that says why it has no such picture."""
    if run.kind == "static-batch" or run.load.shape == "static-batch":
        return static_grid(run.measured)
    if run.kind == "vllm":
        return continuous_grid(run.measured, all_ready=run.load.shape in _ALL_READY)
    return say("This naive run sent one request at a time: slots are drawn for a static batch or a vLLM run.")


def static_grid(records: list[RequestRecord]) -> SlotGrid | Message:
    """One padded generate(): column 0 the prefill, then each row's own tokens, then finished until the
    longest row's last step."""
    recs = sorted(records, key=lambda r: r.index)
    if not recs:
        return say("This run has no requests to draw.")
    if not all(r.ok for r in recs):
        return say("Some requests of this static batch failed, so its steps are not all known.")
    longest = max(r.output_tokens for r in recs)
    if longest <= 0:
        return say("This static batch generated no tokens.")
    cells: list[list[int]] = []
    owner: list[list[int | None]] = []
    for r in recs:
        k = r.output_tokens
        cells.append([PROMPT] + [GENERATING] * k + [FINISHED] * (longest - k))
        owner.append([r.index] * (longest + 1))
    gaps = _gaps(recs)
    step = statistics.median(gaps) if gaps else (recs[0].end_time or 0.0) / (longest + 1)
    return SlotGrid("static", cells, owner, step_s=step,
                    how=say("Exact steps: the worker timed each of the batch's {steps} decoding steps.", steps=longest))


def continuous_grid(records: list[RequestRecord], all_ready: bool = False) -> SlotGrid | Message:
    """Each request in the lowest slot free at its send, from send to end; columns of one estimated step.
    `all_ready`: every request was ready at the start (a closed-loop load), so a slot idle between its
    requests was waste."""
    recs = sorted((r for r in records if r.ok), key=lambda r: (r.send_time, r.index))
    if not recs:
        return say("This run has no finished requests to draw.")
    gaps = _gaps(recs)
    if not gaps:
        return say("This run's requests carry no token times (an import without them, or one-token answers), "
                   "so its decode steps cannot be estimated.")
    chunks = sum(len(r.chunk_times) for r in recs)
    per_chunk = max(1.0, sum(r.output_tokens for r in recs) / chunks) if chunks else 1.0
    step = statistics.median(gaps) / per_chunk
    t0 = min(r.send_time for r in recs)
    t1 = max(end for r in recs if (end := r.end_time) is not None)  # each of recs is ok: it ended
    group = max(1, math.ceil((t1 - t0) / step / MAX_COLUMNS))
    col_s = step * group
    n_cols = max(1, round((t1 - t0) / col_s))

    def col(t: float) -> int:
        return min(n_cols, round((t - t0) / col_s))

    free_at: list[float] = []  # each slot's holder's end
    cells: list[list[int]] = []
    owner: list[list[int | None]] = []
    idle_waiting = 0
    for r in recs:
        free = [i for i, end in enumerate(free_at) if end <= r.send_time]
        slot = max(free, key=lambda i: (free_at[i], -i)) if free else None
        if slot is not None and all_ready:  # the slot stood idle from its last holder's end to this send
            idle_waiting += max(0, col(r.send_time) - col(free_at[slot]))
        if slot is None:
            slot = len(free_at)
            free_at.append(0.0)
            cells.append([IDLE] * n_cols)
            owner.append([None] * n_cols)
        free_at[slot] = r.end_time  # type: ignore[assignment]
        first = r.first_token_time if r.first_token_time is not None else r.end_time
        for c in range(col(r.send_time), col(r.end_time)):  # type: ignore[arg-type]
            cells[slot][c] = PROMPT if c < col(first) else GENERATING  # type: ignore[arg-type]
            owner[slot][c] = r.index
    how = say("Estimated steps: one column is {ms:.0f} ms, the median gap between two streamed tokens of this run.",
              ms=col_s * 1000) if group == 1 else \
        say("Estimated steps: one column is {group} steps of about {ms:.0f} ms (the median gap between two streamed "
            "tokens of this run).", group=group, ms=step * 1000)
    return SlotGrid("continuous", cells, owner, step_s=col_s, steps_per_column=group, idle_waiting=idle_waiting,
                    how=how)


def _gaps(records: list[RequestRecord]) -> list[float]:
    return [b - a for r in records for a, b in zip(r.chunk_times, r.chunk_times[1:]) if b > a]
