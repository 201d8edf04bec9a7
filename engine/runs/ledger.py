"""The batch sizes each server instance has put through, shared by a process's runs: what makes a run
cold or warm (the rule and its limits: engine.measure.judge.warmth)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.measure.judge.warmth import EARLIER_RUN, FIRST, SERVED, WARMED_UP, recall_from, served_from
from engine.results.records import Notes


@dataclass(frozen=True)
class Warmth:
    cold: bool
    why: str  # FIRST | WARMED_UP | EARLIER_RUN | SERVED
    elsewhere: int | None = None  # requests the server had served that this app's runs did not send; None: unknown


class WarmthLedger:
    """Per server instance, the batch sizes it has put through since it started, warm-ups included.

    `recall(instance)` gives the sizes saved runs already put through an instance this ledger has not
    seen yet (the history: an app restarted beside the server it adopted, or the CLI against --url);
    it is asked once per instance. Thread-safe: the app's jobs share one ledger."""

    def __init__(self, recall: Callable[[str], Iterable[int]] = lambda instance: (),
                 recall_served: Callable[[str], int | None] = lambda instance: None):
        self._recall = recall
        self._recall_served = recall_served
        self._seen: dict[str, set[int]] = {}
        self._served: dict[str, int | None] = {}  # the server's served count after this app's latest run there
        self._lock = threading.Lock()

    @classmethod
    def of_history(cls, notes: Callable[[], Iterable[Notes]]) -> "WarmthLedger":
        """A ledger that recalls an instance it meets first from saved runs' `notes()` (the history)."""
        return cls(lambda instance: recall_from(notes(), instance), lambda instance: served_from(notes(), instance))

    def recall(self, instance: str) -> None:
        """Ask the history about `instance` now (once per instance), before a run on it: a long history's read
        then does not come after the run's last answer, when its judge() is asked."""
        with self._lock:
            self._sizes(instance)

    def _sizes(self, instance: str) -> set[int]:
        if instance not in self._seen:
            self._seen[instance] = {n for n in self._recall(instance) if isinstance(n, int) and n > 0}
            self._served.setdefault(instance, self._recall_served(instance))
        return self._seen[instance]

    def judge(self, instance: str, batch: int, warmup_batch: int = 0, served_before: int | None = None,
              served_after: int | None = None) -> Warmth | None:
        """Record a run on `instance` (its warm-up's batch size, then its measured one, and the server's
        served count before and after it, when /metrics says) and say whether the measured batch was the
        first of its size there; None when it measured nothing."""
        with self._lock:
            seen = self._sizes(instance)
            before = batch in seen
            seen.update(n for n in (warmup_batch, batch) if n > 0)
            known = self._served.get(instance)
            if served_after is not None:
                self._served[instance] = served_after
        elsewhere = None if served_before is None else max(0, served_before - (known or 0))
        if batch <= 0:
            return None
        if before:
            return Warmth(False, EARLIER_RUN, elsewhere)
        if warmup_batch == batch:
            return Warmth(False, WARMED_UP, elsewhere)
        if elsewhere is not None and elsewhere >= batch:
            return Warmth(False, SERVED, elsewhere)
        return Warmth(True, FIRST, elsewhere)
