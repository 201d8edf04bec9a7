"""The saved runs as the pages and the CLI read them: lists, one run, the latest pair, exports (read-only)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import LabError
from engine.results.records import RunResult, RunRow
from engine.results.store import RunStore


@dataclass(frozen=True)
class SavedPair:
    """A two-configuration comparison read back from the history: its runs, oldest first, and where they were
    measured (both share it): the rows' source ("local" | "import:<file>" | "example:<file>") and hardware."""

    runs: list[RunResult]
    source: str
    hardware: str
    started_at: float


def entries(rows: list[RunRow], each: bool = False) -> list[list[RunRow]]:
    """History's lines: each run alone, except the repeats of one load test (Runner.repeat's Notes.repeat.group),
    which share one line where the newest of them stands, in repeat order; `each`: every run on its own line."""
    if each:
        return [[r] for r in rows]
    out: list[list[RunRow]] = []
    groups: dict[str, list[RunRow]] = {}
    for r in rows:
        key = r.extra.repeat.group
        if key and not r.problem:
            if key not in groups:
                groups[key] = []
                out.append(groups[key])
            groups[key].append(r)
        else:
            out.append([r])
    for g in groups.values():
        g.sort(key=lambda r: r.extra.repeat.index or 0)
    return out


class History:
    """Reading a RunStore; what changes it (save, import, delete) stays with the Lab's actions."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def runs(self, limit: int | None = None, kind: str | None = None) -> list[RunRow]:
        """Saved runs, newest first, without their requests: read once per change of the history and
        shared by every viewer. Do not modify them."""
        return self._store.list_cached(limit, kind)

    entries = staticmethod(entries)

    def run(self, run_id: str) -> RunResult:
        """One saved run with its requests, shared like runs(); a LabError says why a stored one is damaged."""
        return self._store.load_cached(run_id)

    def readable(self, ids: list[str]) -> tuple[list[RunResult], list[str]]:
        """The runs `ids` that can be read, and the ids of those gone (deleted since a page was drawn)."""
        runs, gone = [], []
        for run_id in ids:
            try:
                runs.append(self.run(run_id))
            except LabError:
                gone.append(run_id)
        return runs, gone

    def latest_pair(self, scenario: str) -> SavedPair | None:
        """The newest readable saved comparison of a two-configuration scenario (kv-squeeze, prefix-cache): the
        newest run and the newest before it from the same source and hardware (an imported H200 pair is never
        half of one measured here); a LabError says why a stored one cannot be read."""
        saved = [r for r in self.runs(limit=100) if r.scenario == scenario and not r.problem]
        if not saved:
            return None
        def where(r: RunRow) -> tuple[str, str]:
            return r.source, str(r.hardware.get("summary") or "")

        newest = saved[0]
        rows = [r for r in saved if where(r) == where(newest)][:2]
        runs = [self.run(r.id) for r in sorted(rows, key=lambda r: r.started_at)]
        return SavedPair(runs, *where(newest), newest.started_at)

    def latest_run(self, kind: str, scenario_prefix: str = "") -> RunResult | None:
        """The newest readable run of `kind` whose scenario starts so, among the latest 50 (a damaged one
        is passed over: History shows why)."""
        for row in self.runs(limit=50, kind=kind):
            if row.scenario.startswith(scenario_prefix) and not row.problem:
                try:
                    return self.run(row.id)
                except LabError:
                    continue
        return None

    def pair_of(self, run_id: str) -> list[RunResult]:
        """A saved side-by-side run and its partner, A first ([] for a run not measured in a pair)."""
        run = self.run(run_id)
        if not run.extra.side_by_side.pair:
            return []
        rows = [r for r in self.runs() if r.extra.side_by_side.pair == run.extra.side_by_side.pair and not r.problem]
        return [self.run(r.id) for r in sorted(rows, key=lambda r: r.extra.side_by_side.side)]

    def export_json(self, ids: list[str] | None = None) -> str:
        """The runs (None: all) as `vllm bench serve`-style JSON, damaged ones and secrets left out."""
        return self._store.export_json(ids)

    def export_csv(self, ids: list[str] | None = None, per: str = "request") -> str:
        """The runs (None: all) as CSV: one row per request, or with per="run" one per run."""
        return self._store.export_csv(ids, per=per)
