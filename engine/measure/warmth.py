"""Cold or warm (issue #12): whether a run's measured part was the first batch of its size that its
server put through since it started. On an H200 the first 10-at-once batch after a start took 4.1 s
(TTFT 3.2 s) and the same batch warm 0.85 s: a cold run measures start-up work, not serving.

The rule, and how far to trust it. A run's batch size is the most of its requests that were in flight
at once (stats.peak_in_flight), for its warm-up and its measured part alike. A run is cold when no
earlier run on the same server instance, and not its own warm-up, reached that size. Why the exact
size: vLLM prepares work per batch shape (CUDA graphs captured per decode batch size, kernels loaded
and tuned the first time a prefill of that many tokens runs), and a batch of N prompts arriving
together is a prefill shape the server has not run before even when bigger batches drained through N
while decoding. It is a proxy from the client's side: the server's scheduler may batch differently
(chunked prefill, a queue when the KV cache is full), graphs captured at start-up make some sizes warm
from the first request, and on a CPU server the cost is small. So "cold" means "the first at its size
since the server started", a reason to distrust the numbers, not a measured penalty.

A server instance is what tells one start from the next (engine.runs.Target.instance: its pid with
its start time). Runs without one (older runs, imports, a server that does not say when it started)
are neither: unknown."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.messages import say
from engine.results.records import Notes

# Why a run is cold or warm (Notes.cold_why): stored codes, said by `said`
FIRST, WARMED_UP, EARLIER_RUN = "first", "warm-up", "earlier-run"


@dataclass(frozen=True)
class Warmth:
    cold: bool
    why: str  # FIRST | WARMED_UP | EARLIER_RUN


class WarmthLedger:
    """Per server instance, the batch sizes it has put through since it started, warm-ups included.

    `recall(instance)` gives the sizes saved runs already put through an instance this ledger has not
    seen yet (the history: an app restarted beside the server it adopted, or the CLI against --url);
    it is asked once per instance. Thread-safe: the app's jobs share one ledger."""

    def __init__(self, recall: Callable[[str], Iterable[int]] = lambda instance: ()):
        self._recall = recall
        self._seen: dict[str, set[int]] = {}
        self._lock = threading.Lock()

    def _sizes(self, instance: str) -> set[int]:
        if instance not in self._seen:
            self._seen[instance] = {n for n in self._recall(instance) if isinstance(n, int) and n > 0}
        return self._seen[instance]

    def judge(self, instance: str, batch: int, warmup_batch: int = 0) -> Warmth | None:
        """Record a run on `instance` (its warm-up's batch size, then its measured one) and say whether
        the measured batch was the first of its size there; None when it measured nothing."""
        with self._lock:
            seen = self._sizes(instance)
            before = batch in seen
            seen.update(n for n in (warmup_batch, batch) if n > 0)
        if batch <= 0:
            return None
        if before:
            return Warmth(False, EARLIER_RUN)
        if warmup_batch == batch:
            return Warmth(False, WARMED_UP)
        return Warmth(True, FIRST)


def recall_from(notes: Iterable[Notes], instance: str) -> set[int]:
    """The batch sizes the runs with these notes put through `instance` (for WarmthLedger's recall)."""
    return {n for x in notes if x.server_instance == instance
            for n in (x.batch_size, x.warmup_batch_size) if isinstance(n, int)}


def said(notes: Notes) -> str | None:
    """Why a run is cold or warm, one sentence; None when unknown (an older run, an import)."""
    n = notes.batch_size
    if notes.cold is None or n is None:
        return None
    if notes.cold:
        return say("Cold: the first batch of {n} in flight since the server started. vLLM may do one-off work the "
                   "first time it runs a batch of a size, so these numbers can include start-up cost; run it again, "
                   "or warm up first, to measure serving.", n=n)
    if notes.cold_why == WARMED_UP:
        return say("Warm: the warm-up put a batch of {n} through the server first.", n=n)
    return say("Warm: this server had already run a batch of {n} in flight since it started.", n=n)
