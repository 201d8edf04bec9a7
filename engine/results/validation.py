"""What a run must be to enter the history or be shown from it, checked field by field, refused in one sentence.
See docs/internals.md#exchange."""
from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from typing import Any

from engine.errors import LabError
from engine.messages import say
from engine.results.records import Load, Notes, RequestRecord, RunResult, Summary, is_sane_time


class RunDamaged(LabError):
    """A stored run cannot be read back (an older database, a hand edit); it can still be deleted."""


class ImportFailed(LabError):
    """A file given to import is not a Serving Lab export nor a `vllm bench serve` result, or breaks
    one of its rules; nothing of it was imported."""


class Invalid(Exception):
    """What is wrong with one field of a run, e.g. 'records[4].send_time is not a number'."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


MISSING = object()
REL_S = 1e7  # seconds from a run's start (any time inside a run, its wall time): no run lasts 4 months
COUNT = 1e9  # tokens of one request, a request's index
MAX_RECORDS = 200_000
_MAX_CHUNKS = 200_000
_MAX_DEPTH = 20
_LAST_DATE = datetime(9999, 12, 31).timestamp()


def field_of(d: dict, key: str, pre: str = "", default: Any = MISSING) -> Any:
    """d[key]; `default` when it is missing, Invalid when there is no default."""
    if key in d:
        return d[key]
    if default is MISSING:
        raise Invalid(say("{field} is missing", field=pre + key))
    return default


def checked_text(v: Any, where: str, limit: int, nullable: bool = False) -> Any:
    if v is None and nullable:
        return None
    if not isinstance(v, str):
        raise Invalid(say("{where} is not text", where=where))
    if len(v) > limit:
        raise Invalid(say("{where} is longer than {limit:,} characters", where=where, limit=limit))
    return v


def checked_number(v: Any, where: str, lo: float, hi: float, *, nullable: bool = False,
                   whole: bool = False) -> Any:
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise Invalid(say("{where} is not a number", where=where))
    if isinstance(v, float) and math.isinf(v):
        raise Invalid(say("{where} is infinite", where=where))
    if whole and isinstance(v, float) and not v.is_integer():
        raise Invalid(say("{where} is not a whole number", where=where))
    if not lo <= v <= hi:
        raise Invalid(say("{where} is negative", where=where) if lo == 0 and v < 0 else
                      say("{where} is out of range ({lo:g} to {hi:g})", where=where, lo=lo, hi=hi))
    return int(v) if whole else float(v)


def _object(v: Any, where: str) -> dict:
    """A free-form JSON object (settings, hardware, notes), nested no deeper than _MAX_DEPTH."""
    if not isinstance(v, dict):
        raise Invalid(say("{where} is not an object", where=where))
    stack: list[tuple[dict | list, int]] = [(v, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise Invalid(say("{where} is nested deeper than {depth} levels", where=where, depth=_MAX_DEPTH))
        stack += [(c, depth + 1) for c in (x.values() if isinstance(x, dict) else x) if isinstance(c, (dict, list))]
    return v


def _times(values: list, where: str) -> list[float]:
    """A list of times in a run; checked at once when it is plainly fine (an export holds ~10^5 of them)."""
    if all(type(t) in (float, int) for t in values) and math.isfinite(sum(values)) \
            and -REL_S <= min(values, default=0) and max(values, default=0) <= REL_S:
        return [float(t) for t in values]
    return [checked_number(t, f"{where}[{k}]", -REL_S, REL_S) for k, t in enumerate(values)]


def _record(r: Any, at: str) -> RequestRecord:
    if not isinstance(r, dict):
        raise Invalid(say("{where} is not an object", where=at))
    pre = f"{at}."
    send = checked_number(field_of(r, "send_time", pre), f"{at}.send_time", -REL_S, REL_S)
    times = {}
    for key in ("end_time", "first_token_time"):
        t = times[key] = checked_number(r.get(key), f"{at}.{key}", -REL_S, REL_S, nullable=True)
        if t is not None and t < send - 1e-6:
            raise Invalid(say("{where} is before its send_time", where=pre + key))
    chunks = field_of(r, "chunk_times", pre, [])
    if not isinstance(chunks, list):
        raise Invalid(say("{where} is not a list", where=pre + "chunk_times"))
    if len(chunks) > _MAX_CHUNKS:
        raise Invalid(say("{where} holds more than {limit:,} times", where=pre + "chunk_times", limit=_MAX_CHUNKS))
    warmup = field_of(r, "warmup", pre, False)
    if warmup not in (True, False):  # 0 and 1 too
        raise Invalid(say("{where} is not true or false", where=pre + "warmup"))
    return RequestRecord(
        index=checked_number(field_of(r, "index", pre), f"{at}.index", -COUNT, COUNT, whole=True),
        prompt=checked_text(field_of(r, "prompt", pre, ""), f"{at}.prompt", 1_000_000),
        send_time=send, end_time=times["end_time"], first_token_time=times["first_token_time"],
        chunk_times=_times(chunks, f"{at}.chunk_times"),
        prompt_tokens=checked_number(field_of(r, "prompt_tokens", pre, 0), f"{at}.prompt_tokens", 0, COUNT,
                                     whole=True),
        output_tokens=checked_number(field_of(r, "output_tokens", pre, 0), f"{at}.output_tokens", 0, COUNT,
                                     whole=True),
        tokens_source=checked_text(field_of(r, "tokens_source", pre, "usage"), f"{at}.tokens_source", 64),
        output_text=checked_text(field_of(r, "output_text", pre, ""), f"{at}.output_text", 1_000_000),
        error=checked_text(r.get("error"), f"{at}.error", 20_000, nullable=True),
        warmup=bool(warmup),
        cached_tokens=checked_number(r.get("cached_tokens"), f"{at}.cached_tokens", 0, COUNT, whole=True,
                                     nullable=True),
        conversation=checked_number(r.get("conversation"), f"{at}.conversation", 0, COUNT, whole=True, nullable=True),
        turn=checked_number(r.get("turn"), f"{at}.turn", 0, COUNT, whole=True, nullable=True),
        planned_time=checked_number(r.get("planned_time"), f"{at}.planned_time", -REL_S, REL_S, nullable=True),
        slot_wait=checked_number(r.get("slot_wait"), f"{at}.slot_wait", 0, REL_S, nullable=True),
    )


def content_id(obj: Any, prefix: str) -> str:
    """An id made from what `obj` holds: the same content gets the same id, so importing it twice adds
    it once."""
    return prefix + hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def checked_run(d: dict[str, Any], strict: bool = False) -> RunResult:
    """A RunResult from `d` (RunResult.to_dict() shape) if it keeps every rule, else Invalid naming the
    first field that breaks one. strict (imports): the start must be a date between 2000 and tomorrow;
    stored runs only need a date a calendar can show (older versions saved 0 for an unknown start)."""
    rid = d.get("id", MISSING)
    if rid is MISSING:
        rid = content_id(d, "im")
    elif not re.fullmatch(r"[\w.:-]{1,64}", checked_text(rid, "id", 64)):
        raise Invalid(say("{where} is not 1 to 64 letters, digits, '.', ':', '-' or '_'", where="id"))
    kind = checked_text(field_of(d, "kind"), "kind", 64)
    if not kind:
        raise Invalid(say("{where} is empty", where="kind"))
    started = checked_number(field_of(d, "started_at"), "started_at", -math.inf, math.inf)
    if not (is_sane_time(started) if strict else 0 <= started <= _LAST_DATE):
        raise Invalid(say("{where} is not a date between 2000 and now", where="started_at"))
    records = field_of(d, "records")
    if not isinstance(records, list):
        raise Invalid(say("{where} is not a list", where="records"))
    if len(records) > MAX_RECORDS:
        raise Invalid(say("{where} holds more than {limit:,} requests", where="records", limit=MAX_RECORDS))
    summary = _object(field_of(d, "summary", default={}), "summary")
    for key, v in summary.items():
        checked_number(v, f"summary.{checked_text(key, 'a summary key', 100)}", -math.inf, math.inf, nullable=True)
    versions = _object(field_of(d, "versions", default={}), "versions")
    return RunResult(
        id=rid, kind=kind,
        scenario=checked_text(field_of(d, "scenario"), "scenario", 300),
        label=checked_text(field_of(d, "label"), "label", 300),
        records=[_record(r, f"records[{i}]") for i, r in enumerate(records)],
        duration=checked_number(field_of(d, "duration"), "duration", 0, REL_S),
        started_at=started,
        model=checked_text(field_of(d, "model", default=""), "model", 1000),
        config=_object(field_of(d, "config", default={}), "config"),
        command=checked_text(field_of(d, "command", default=""), "command", 100_000),
        load=Load.from_dict(_object(field_of(d, "load", default={}), "load")),
        hardware=_object(field_of(d, "hardware", default={}), "hardware"),
        versions=versions,
        summary=Summary.from_dict(summary),
        extra=Notes.from_dict(_object(field_of(d, "extra", default={}), "extra")),
    )


def quote(label: Any) -> str:
    """A label from a file, fit to sit inside a sentence that is shown as Markdown: no markup, short."""
    clean = " ".join(re.sub(r"[^\w .,/+%=-]", " ", re.sub(r"<[^>]*>", "", str(label))).split())
    return f"'{clean[:40]}…'" if len(clean) > 40 else f"'{clean}'"
