"""A history written before the notes were split into parts opens and reads the same values.

tests/data/history-v5/ was written by the code of schema 5 (main at ce04e77), through a real RunStore.save of a run
with every field of every record set (tests/test_record_round_trip.py's sample run): `history.sqlite` as it left it,
`export.json` its export (format serving-lab-run/1, flat notes), `run.json` the run as that code read it back."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from engine.results.database import SCHEMA_VERSION
from engine.results.records import V5_KEYS, Notes, Part, RunResult, from_v5
from engine.results.store import RunStore
from engine.results.vllm_bench import EXPORT_FORMAT, FORMAT_1

DATA = Path(__file__).parent / "data" / "history-v5"
WRITTEN = json.loads((DATA / "run.json").read_text())  # what schema 5's code read back
RUN_ID = WRITTEN["id"]


@pytest.fixture
def old_history(tmp_path) -> Path:
    path = tmp_path / "history.sqlite"
    shutil.copy(DATA / "history.sqlite", path)  # opening it migrates it: never the repository's copy
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 5
    return path


def _at(notes: Notes, key: str) -> Any:
    """Where schema 5's flat `key` lives now, as stored (a part that was a dict then: its stored shape)."""
    value: Any = notes
    for name in V5_KEYS.get(key, (key,)):
        value = getattr(value, name)
    return value.to_dict() if isinstance(value, Part) else value


def _same_values(run: RunResult) -> None:
    flat = WRITTEN["extra"]
    known = {k: v for k, v in flat.items() if k in V5_KEYS or k in Notes.model_fields}
    assert len(known) > 60  # the sample sets every field schema 5 had
    assert {k: _at(run.extra, k) for k in known} == known
    assert run.extra.other == {k: v for k, v in flat.items() if k not in known}  # keys no version knew, kept
    parts = [getattr(run.extra, name) for name in Notes.model_fields if name != "other"]
    # nothing left unread in a part (the server's view, a dict of no known key in the sample, aside: below)
    assert [p.other for p in parts if hasattr(p, "other") and p.other and p is not run.extra.server_view] == []
    # a few by hand, as a reader reaches them now
    n = run.extra
    assert (n.side_by_side.pair, n.side_by_side.side) == ("pair value", "pair_side value")
    assert (n.repeat.group, n.repeat.index, n.repeat.total) == ("repeat_group value", 18, 84)
    assert (n.warmth.cold, n.warmth.why, n.warmth.instance) == (True, "cold_why value", "server_instance value")
    # what were dicts then are typed parts now, keys they do not know kept aside and written back
    assert n.energy.reading.other == {"energy key": "energy value", "n": 68}
    assert n.energy.missing == "energy_missing value"
    assert n.server_view.other == {"server_view key": "server_view value", "n": 37} and n.server_view.histograms == {}
    assert n.beside.disturbance.other == {"disturbance key": "disturbance value", "n": 8}
    assert n.naive.memory.other == {"memory key": "memory value", "n": 83} and n.naive.memory.before is None
    assert (n.token_count.server, n.token_count.client, n.beside.chats) == (75, 51, 88)
    assert (n.load_client.name, n.naive.worker_pid, n.server.max_concurrency) == ("client value", 18, 59.25)
    # everything beside the notes as it was
    back = run.to_dict()
    assert {k: v for k, v in back.items() if k != "extra"} == {k: v for k, v in WRITTEN.items() if k != "extra"}


def test_a_schema_5_history_opens_migrated_and_reads_the_same_values(old_history):
    store = RunStore(old_history)
    with sqlite3.connect(old_history) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        stored = json.loads(c.execute("SELECT extra FROM runs WHERE id=?", (RUN_ID,)).fetchone()[0])
    assert not set(stored) & (set(V5_KEYS) - {"energy"}) and stored["side_by_side"] == {"pair": "pair value",
                                                                                         "side": "pair_side value"}
    _same_values(store.load(RUN_ID))
    (row,) = store.list()
    assert row.extra == store.load(RUN_ID).extra
    assert RunStore(old_history).load(RUN_ID).extra == row.extra  # opened again: migrated once, read the same


def test_an_export_of_schema_5_imports_with_the_same_values(tmp_path):
    store = RunStore(tmp_path / "h.sqlite")
    assert store.import_file(DATA / "export.json") == [RUN_ID]
    _same_values(store.load(RUN_ID))


def test_a_run_saved_now_is_stored_in_parts_and_read_back_whole(old_history, tmp_path):
    run = RunStore(old_history).load(RUN_ID)
    store = RunStore(tmp_path / "new.sqlite")
    store.save(run)
    with sqlite3.connect(tmp_path / "new.sqlite") as c:
        stored = json.loads(c.execute("SELECT extra FROM runs").fetchone()[0])
    assert stored == run.extra.to_dict() and "warmth" in stored and "cold_why" not in stored
    assert store.load(RUN_ID).extra == run.extra


# -- the shipped examples ---------------------------------------------------------------------------------------

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.json"))


def _aside(part: Any, where: str = "extra") -> list[str]:
    """What any part inside `part` kept aside (a key it does not know, a value not of its type), by where."""
    out = [f"{where}: {part.other}"] if part.other else []
    for name in type(part).model_fields:
        value = getattr(part, name)
        for key, v in value.items() if isinstance(value, dict) else [("", value)]:
            if isinstance(v, Part):
                out += _aside(v, f"{where}.{name}" + (f"[{key}]" if key else ""))
    return out


def _flat(notes: dict[str, Any]) -> dict[str, Any]:
    """Notes as format 1 wrote them: each part's fields under schema 5's flat names."""
    flat_name = {where: key for key, where in V5_KEYS.items()}
    out = {}
    for name, value in notes.items():
        if name in Notes.model_fields and isinstance(value, dict) and (name, next(iter(value), "")) in flat_name:
            out.update({flat_name[name, k]: v for k, v in value.items()})
        else:
            out[name] = value
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_each_shipped_example_is_todays_format_read_whole_and_its_format_1_reads_the_same(tmp_path, path):
    objs = json.loads(path.read_text(encoding="utf-8"))
    assert {o["serving_lab"]["format"] for o in objs} == {EXPORT_FORMAT}
    store = RunStore(tmp_path / "today.sqlite")
    ids = store.import_file(path)
    assert len(ids) == len(objs)
    runs = [store.load(i) for i in ids]
    assert [a for r in runs for a in _aside(r.extra)] == []  # every note read as its type, none kept aside
    assert [r.extra.to_dict() for r in runs] == [o["serving_lab"]["extra"] for o in objs]  # written as read
    # the same runs exported in format 1 (flat notes, as these files were until schema 6) read the same notes
    old = [{**o, "serving_lab": {**o["serving_lab"], "format": FORMAT_1, "extra": _flat(o["serving_lab"]["extra"])}}
           for o in objs]
    assert any(o["serving_lab"]["extra"] != n["serving_lab"]["extra"] for o, n in zip(old, objs))  # flat indeed
    older = RunStore(tmp_path / "format-1.sqlite")
    assert older.import_text(json.dumps(old), "format-1.json") == ids
    assert [older.load(i).extra for i in ids] == [r.extra for r in runs]


# What schema 5's code wrote where today's parts were dicts (histograms.view with engine_counters.view,
# EnergyMeter.stop, disturbance.record): read typed, nothing left aside, written back as it was (None left out)
V5_DICTS = {
    "server_view": {
        "histograms": {"queue": {"count": 4.0, "sum": 0.0012, "mean": 0.0003, "p50": 0.0006, "p90": 0.0027,
                                 "p99": 0.03, "p50_kind": "below", "p90_kind": "below", "p99_kind": "below",
                                 "p50_bucket": [0.0, 0.3], "p90_bucket": [0.0, 0.3], "p99_bucket": [0.0, 0.3],
                                 "buckets": [[0.3, 4.0], [0.5, 0.0], [None, 0.0]]},
                       "e2e": {"count": 4.0, "sum": 3.9, "mean": 0.975, "p50": None, "p50_kind": None,
                               "p50_bucket": [0.8, None], "buckets": [[0.8, 0.0], [None, 4.0]]}},
        "missing": ["itl"],
        "steps": {"count": 17.0, "tokens": 84.0, "mean_tokens": 4.94, "buckets": [[1.0, 0.0], [None, 17.0]],
                  "mean_batch": None},
        "spec_decode": {"drafts": 40.0, "draft_tokens": 120.0, "accepted": 60.0, "accepted_at": [30.0, 20.0, 10.0]},
        "estimated": {"flops": 4e12, "read_bytes": 2e10, "write_bytes": 1e9}},
    "energy": {"method": "nvml-power", "joules": 32.0, "seconds": 2.0, "mean_w": 16.0, "idle_w": None, "samples": 21},
    "disturbance": {"seconds": 12.5, "cores": 2, "others_cores": 1.4, "steal_cores": 0.0, "other_requests": 3},
}


def _said(v: Any) -> Any:
    """`v` without the None values today's parts leave out."""
    if isinstance(v, dict):
        return {k: _said(x) for k, x in v.items() if x is not None}
    return [_said(x) for x in v] if isinstance(v, list) else v


def test_what_schema_5_kept_as_dicts_reads_typed(tmp_path):
    flat = json.loads(json.dumps(V5_DICTS))  # as stored
    run = RunResult(kind="vllm", scenario="s", label="l", records=[], duration=1.0, started_at=1.7e9,
                    extra=from_v5(flat))
    n = run.extra
    assert _aside(n) == []
    assert n.server_view.histograms["queue"].p50_bucket == [0.0, 0.3] and n.server_view.steps.count == 17.0
    assert n.server_view.spec_decode.accepted_at == [30.0, 20.0, 10.0] and n.server_view.estimated.flops == 4e12
    assert (n.energy.reading.method, n.energy.reading.samples, n.beside.disturbance.other_requests) == \
        ("nvml-power", 21, 3)
    stored = n.to_dict()
    assert (stored["server_view"], stored["energy"]["reading"], stored["beside"]["disturbance"]) == \
        (_said(V5_DICTS["server_view"]), _said(V5_DICTS["energy"]), V5_DICTS["disturbance"])
