"""Nothing measured can vanish: every field of every record type survives the history and an export, whatever
its name, and only credentials (an explicit list of keys, and secret values where they occur) are taken out.

The run is built from the records' own fields (the dataclasses' and every part of the pydantic models, nested parts
included), so a field added tomorrow is covered without touching this file: it gets a value unlike its default, and
the test names it when it does not come back."""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from engine.messages import say, to_json
from engine.results.credentials import scrub, scrub_run, scrub_text
from engine.results import records
from engine.results.records import Load, Notes, RequestRecord, RunResult, Summary
from engine.results.store import RunStore

# Values a field must hold to be a valid run (validation.checked_run) or to be read as what it is; every other
# field gets one made from its type alone.
_CONSTRAINED: dict[tuple[str, str], Any] = {
    ("RunResult", "started_at"): 1_764_500_000.0,  # a date
    ("RunResult", "id"): "roundtrip01",
    ("RequestRecord", "send_time"): 0.5,  # the request's other times are after it
    ("Summary", "latency_ms"): {"median_ttft_ms": 41.5, "p99_itl_ms": 7.25},  # the keys vllm bench serve names
    ("Summary", "other"): {"vendor_metric": 3.5},  # a summary holds numbers only
    ("Notes", "label_said"): to_json(say("vLLM, {n} at once", n=4)),
}


def _sample(owner: str, name: str, hint: Any, default: Any) -> Any:
    """A value of type `hint` unlike `default`: a number, text or collection that says which field it is."""
    if (owner, name) in _CONSTRAINED:
        return _CONSTRAINED[owner, name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(h for h in typing.get_args(hint) if h is not type(None))
    base = typing.get_origin(hint) or hint
    if typing.get_origin(hint) is typing.Annotated:  # records.Int
        base = typing.get_args(hint)[0]
    if dataclasses.is_dataclass(base) or _is_part(base):
        return _build(base)
    if base is bool:
        return not default if isinstance(default, bool) else True
    seed = sum(map(ord, name)) % 97  # a different number in each field: a swapped pair of columns shows
    if base is int:
        return 7 + seed
    if base is float:
        return 1.25 + seed
    if base is str:
        return f"{name} value"
    if base is list:
        (item,) = typing.get_args(hint) or (Any,)
        return [f"{name} item", {"n": seed}] if item is Any else [_sample(owner, name, item, None)]
    if base is dict and typing.get_args(hint):  # keyed values of a type: a part's by name
        return {f"{name} key": _sample(owner, name, typing.get_args(hint)[1], None)}
    if base is dict or base is Any:
        return {f"{name} key": f"{name} value", "n": seed}
    raise TypeError(f"{owner}.{name}: no sample for {hint!r}; add one to _CONSTRAINED")


def _is_part(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, BaseModel)


def _fields(cls: type) -> dict[str, Any]:
    """Each field's name -> its default (None where it has none)."""
    if _is_part(cls):
        return {name: f.get_default(call_default_factory=True) for name, f in cls.model_fields.items()
                if name != "other"}  # what a part could not read: test_records
    return {f.name: f.default_factory() if callable(f.default_factory) else
            None if f.default is dataclasses.MISSING else f.default for f in dataclasses.fields(cls)}


def _build(cls: type) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    values = {}
    for name, default in _fields(cls).items():
        values[name] = _sample(cls.__name__, name, hints[name], default)
        assert values[name] != default, f"{cls.__name__}.{name}: the sample is its default, it proves nothing"
    return cls(**values)


def _every_field(run: RunResult, reached: set | None = None) -> dict[str, Any]:
    """'Notes.warmth.why' -> value, for every field of the run and of each part it holds, nested parts included (and
    parts held by key: 'RunResult.extra.server_view.histograms[queue].mean'); `reached` gets each type walked."""
    out: dict[str, Any] = {}

    def walk(owner: str, obj: Any) -> None:
        if reached is not None:
            reached.add(type(obj))
        for name in _fields(type(obj)):
            value = getattr(obj, name)
            if _is_part(type(value)):
                walk(f"{owner}.{name}", value)
            elif isinstance(value, dict) and value and all(_is_part(type(v)) for v in value.values()):
                for key, part in value.items():
                    walk(f"{owner}.{name}[{key}]", part)
            elif owner != "RunResult" or name not in ("records",):
                out[f"{owner}.{name}"] = value

    walk("RunResult", run)
    for i, r in enumerate(run.records):
        walk(f"RequestRecord[{i}]", r)
    out["RunResult.records"] = len(run.records)
    return out


def _parts(run: RunResult) -> list[BaseModel]:
    """Every part the run holds, nested ones included."""
    out: list[BaseModel] = []

    def walk(obj: Any) -> None:
        for value in (getattr(obj, n) for n in _fields(type(obj))):
            for v in value.values() if isinstance(value, dict) else [value]:
                if _is_part(type(v)):
                    out.append(v)
                    walk(v)

    walk(run)
    return out


def _lost(before: RunResult, after: RunResult) -> list[str]:
    a, b = _every_field(before), _every_field(after)
    return [f"{k}: {a[k]!r} came back as {b.get(k)!r}" for k in a if b.get(k) != a[k]]


@pytest.fixture
def full_run() -> RunResult:
    run = _build(RunResult)
    assert [type(p) for p in (run.load, run.extra, run.summary, run.records[0])] == \
        [Load, Notes, Summary, RequestRecord]
    return run


def test_every_field_of_every_record_survives_the_history(tmp_path, full_run):
    store = RunStore(tmp_path / "history.sqlite")
    store.save(full_run)
    assert _lost(full_run, store.load(full_run.id)) == []
    row = store.list()[0]  # the history's list reads the same metadata without the requests
    assert [n for n in ("load", "extra", "summary", "config", "hardware", "versions", "command")
            if getattr(row, n) != getattr(full_run, n)] == []


def test_every_part_of_the_notes_is_sampled(full_run):
    """The walk above reaches into every part: a part it skipped would be a part no test saves."""
    parts = {name for name, f in Notes.model_fields.items()
             if any(_is_part(t) for t in (f.annotation, *typing.get_args(f.annotation)))}  # optional parts too
    walked = {k.split(".")[2] for k in _every_field(full_run) if k.startswith("RunResult.extra.") and k.count(".") == 3}
    assert parts and parts == walked
    # and every part type records.py defines, however deep (the server's view's histograms, the naive worker's
    # memory at each point, ...), each with every field set to a value of its type
    reached: set = set()
    _every_field(full_run, reached)
    defined = {c for c in vars(records).values() if _is_part(c) and c.__module__ == records.__name__} - {records.Part}
    assert defined - reached == set()
    assert [f"{type(p).__name__}: {p.other}" for p in _parts(full_run) if p.other and type(p) is not Summary] == []


def test_every_field_of_every_record_survives_an_export_and_its_import(tmp_path, full_run):
    first = RunStore(tmp_path / "a.sqlite")
    first.save(full_run)
    second = RunStore(tmp_path / "b.sqlite")
    assert second.import_text(first.export_json(), source="import:a.json") == [full_run.id]
    assert _lost(full_run, second.load(full_run.id)) == []


def test_a_measurement_named_like_a_secret_is_kept():
    measured = {"joules_per_token": 1.5, "first_token": 2, "max_tokens": 3, "bytes_per_token": 4,
                "tokenizer": "t", "secret_sauce_ratio": 0.5, "password_length": 8, "auth_failures": 1}
    assert scrub(measured) == measured
    run = _build(RunResult)
    run.extra.other = dict(measured)
    assert scrub_run(run).extra.to_dict() == run.extra.to_dict()


def test_credentials_go_by_their_key_at_any_depth_and_by_their_value_where_they_occur():
    secret = "sk-lab-5ecret-value-0042"
    given = {
        "api_key": secret, "API-KEY": secret, "hf_token": secret, "Password": secret, "token": secret,
        "headers": {"Authorization": f"Bearer {secret}", "X-Api-Key": secret, "Accept": "text/event-stream"},
        "base_url": f"http://me:{secret}@host:8000/v1?api_key={secret}&model=m",
        "argv": ["vllm", "serve", "--api-key", secret, "--hf-token", secret, "--max-num-batched-tokens", "512"],
        "note": f"curl -H 'Authorization: Bearer {secret}' http://h/v1",
        "max_tokens": 64,
    }
    clean = scrub(given)
    assert secret not in json.dumps(clean)
    assert clean["headers"] == {"Accept": "text/event-stream"}
    assert set(clean) == {"headers", "base_url", "argv", "note", "max_tokens"}
    assert clean["base_url"] == "http://me:***@host:8000/v1?api_key=***&model=m"
    assert clean["argv"] == ["vllm", "serve", "--api-key", "$VLLM_API_KEY", "--hf-token", "$HF_TOKEN",
                             "--max-num-batched-tokens", "512"]
    assert clean["max_tokens"] == 64
    line = f"HF_TOKEN={secret} vllm serve m --api-key={secret} --max-tokens 3 --token {secret}"
    assert scrub_text(line) == 'HF_TOKEN="$HF_TOKEN" vllm serve m --api-key=$VLLM_API_KEY --max-tokens 3 --token $TOKEN'
