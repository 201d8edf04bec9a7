"""`vllm bench serve`'s result file, both ways: a run as one of its JSON objects, and a run rebuilt from one.
See docs/internals.md#exchange."""
from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Callable

from engine.messages import say
from engine.results.credentials import scrub_run
from engine.results.records import Load, Notes, RequestRecord, RunResult, Summary, from_v5
from engine.results.validation import (
    COUNT,
    MAX_RECORDS,
    MISSING,
    REL_S,
    ImportFailed,
    Invalid,
    checked_number,
    checked_run,
    checked_text,
    content_id,
    field_of,
)

EXPORT_FORMAT = "serving-lab-run/2"  # 2: the notes (extra) in parts by concept
FORMAT_1 = "serving-lab-run/1"  # the notes flat (records.from_v5): read too, as is an export that names no format
_BACKENDS = {"vllm": "openai-chat", "naive": "transformers", "static-batch": "transformers-static-batch"}


def _summary_for(run: RunResult) -> dict[str, Any]:
    """The run's own summary (the Runner summarises every run it saves, imports bring theirs); for a run
    that has none, the basic totals only: the vllm-named percentiles are measure's to compute (results/ sits
    below it and does not reach up)."""
    if not run.summary.empty:
        return run.summary.to_dict()
    m = run.measured
    ok = [r for r in m if r.ok]
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens for r in ok)
    d = run.duration or float("nan")
    return {
        "duration": run.duration, "completed": len(ok), "failed": len(m) - len(ok),
        "total_input_tokens": in_tok, "total_output_tokens": out_tok,
        "request_throughput": len(ok) / d, "output_throughput": out_tok / d,
        "total_token_throughput": (in_tok + out_tok) / d,
    }


def max_concurrent_requests(records: list[RequestRecord]) -> int:
    """vllm bench serve's max_concurrent_requests, counted as it counts it: each successful request is counted in
    every whole second from the first start that it touches (from its start's second to its end's, both included),
    and the fullest second wins, so requests back to back within one second count as concurrent."""
    ok = [r for r in records if r.ok]
    if not ok:
        return 0
    t0 = min(r.send_time for r in ok)
    seconds: dict[int, int] = {}
    for r in ok:
        for s in range(int(r.send_time - t0), int(r.end_time - t0) + 1):  # type: ignore[operator]
            seconds[s] = seconds.get(s, 0) + 1
    return max(seconds.values())


# vllm bench serve's --backend for each endpoint a load test sends to (chat: _BACKENDS's openai-chat)
_ENDPOINT_BACKENDS = {"completions": "openai", "embeddings": "openai-embeddings", "rerank": "vllm-rerank"}


def to_bench_json(run: RunResult) -> dict[str, Any]:
    """One run as a `vllm bench serve` result object (+ "serving_lab": the whole RunResult), without
    credentials."""
    run = scrub_run(run)
    m = run.measured
    load = run.load
    rate = float("inf") if load.rate is None else load.rate  # vllm's "inf": all sent at once
    backend = load.backend or _ENDPOINT_BACKENDS.get(load.endpoint, _BACKENDS.get(run.kind, run.kind))
    conc = load.concurrency
    obj: dict[str, Any] = {
        "date": datetime.fromtimestamp(run.started_at).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,  # vllm's names: openai-chat, openai (completions)
        "backend": backend,
        "label": run.label,
        "model_id": run.model,
        "tokenizer_id": run.config.get("tokenizer") or run.model,
        "num_prompts": len(m),
        "request_rate": "inf" if isinstance(rate, (int, float)) and math.isinf(rate) else rate,
        "burstiness": 1.0 if load.burstiness is None else load.burstiness,
        "max_concurrency": conc,
    }
    summ = _summary_for(run)
    # Our summary's max_concurrency is the observed peak; vllm's is the configured limit and it
    # calls the observed peak max_concurrent_requests.
    observed = summ.pop("max_concurrency", None)
    obj["request_goodput"] = None  # vllm's key even without --goodput (null), as its file has it
    obj.update(summ)
    obj["max_concurrency"] = conc
    obj["max_concurrent_requests"] = max_concurrent_requests(m) if any(r.ok for r in m) else observed
    obj["peak_in_flight"] = observed  # the exact peak (vllm's count above includes neighbours within a second)
    obj["rtfx"] = 0.0  # vllm's inverse real-time factor, 0.0 for a run without audio
    obj["duration"] = run.duration
    # Per-request lists, with vllm's conventions: seconds, 0.0 / [] / "" where there is nothing.
    obj["input_lens"] = [r.prompt_tokens for r in m]
    obj["output_lens"] = [r.output_tokens for r in m]
    obj["ttfts"] = [r.ttft if r.ttft is not None else 0.0 for r in m]
    obj["itls"] = [[b - a for a, b in zip(r.chunk_times, r.chunk_times[1:])] for r in m]
    obj["latencies"] = [r.e2e if r.e2e is not None else 0.0 for r in m]
    obj["start_times"] = [r.send_time for r in m]
    obj["queue_times"] = [r.queue_time for r in m]  # null where the arrival is not known (a chat's later turn)
    obj["generated_texts"] = [r.output_text for r in m]
    obj["errors"] = [r.error or "" for r in m]
    obj["serving_lab"] = {"format": EXPORT_FORMAT, **run.to_dict()}
    return obj


def from_bench_json(obj: dict[str, Any]) -> RunResult:
    """The RunResult inside an export; for a plain `vllm bench serve` file, one rebuilt from it.
    ImportFailed, naming the first field that breaks a rule, when it is not a run this app can show."""
    lab = obj.get("serving_lab", MISSING)
    if lab is MISSING and "model_id" not in obj and "completed" not in obj:
        raise ImportFailed(say("it is neither a Serving Lab export nor a vllm bench serve result (it has no "
                               "'serving_lab', 'model_id' or 'completed' key): pick a file one of them wrote."))
    try:
        if lab is MISSING:
            return checked_run(_from_vllm_result(obj).to_dict(), strict=True)
        if not isinstance(lab, dict):
            raise Invalid(say("{where} is not an object", where="serving_lab"))
        run = {k: v for k, v in lab.items() if k != "format"}
        if lab.get("format", FORMAT_1) == FORMAT_1 and isinstance(run.get("extra"), dict):
            run["extra"] = from_v5(run["extra"])  # the notes flat, as schema 5 kept them
        return checked_run(run, strict=True)
    except Invalid as e:
        maker = "vllm bench serve" if lab is MISSING else "Serving Lab"
        raise ImportFailed(say("{what}: export it again from {maker}.", what=e.what, maker=maker)) from None


def _vllm_list(obj: dict, key: str, check: Callable[[Any, str], Any]) -> list:
    v = obj.get(key) or []
    if not isinstance(v, list):
        raise Invalid(say("{where} is not a list", where=key))
    if len(v) > MAX_RECORDS:
        raise Invalid(say("{where} holds more than {limit:,} requests", where=key, limit=MAX_RECORDS))
    return [check(x, f"{key}[{i}]") for i, x in enumerate(v)]


def _from_vllm_result(obj: dict[str, Any]) -> RunResult:
    """A run rebuilt from a `vllm bench serve` result's per-request lists (their types checked here,
    the run itself by checked_run)."""
    def num(x, where):
        return checked_number(x, where, -REL_S, REL_S, nullable=True) or 0.0

    def count(x, where):
        return checked_number(x, where, 0, COUNT, nullable=True, whole=True) or 0

    def text(x, where):
        return checked_text(x, where, 1_000_000, nullable=True) or ""

    def gaps(x, where):
        if not isinstance(x, list):
            raise Invalid(say("{where} is not a list", where=where))
        return [checked_number(g, f"{where}[{k}]", 0, REL_S) for k, g in enumerate(x)]

    ttfts, lats = _vllm_list(obj, "ttfts", num), _vllm_list(obj, "latencies", num)
    starts, itls = _vllm_list(obj, "start_times", num), _vllm_list(obj, "itls", gaps)
    ins, outs = _vllm_list(obj, "input_lens", count), _vllm_list(obj, "output_lens", count)
    texts, errors = _vllm_list(obj, "generated_texts", text), _vllm_list(obj, "errors", text)
    n = len(ttfts or lats)
    t0 = min(starts) if starts else 0.0
    records = []
    for i in range(n):
        def at(values, default):
            return values[i] if i < len(values) else default

        send = at(starts, t0) - t0
        err = at(errors, "") or None
        lat, ttft = at(lats, 0.0), at(ttfts, 0.0)
        chunks: list[float] = []
        if ttft:
            t = send + ttft
            chunks.append(t)
            for gap in at(itls, []):
                t += gap
                chunks.append(t)
        records.append(RequestRecord(
            index=i, prompt="", send_time=send,
            end_time=None if (err and not lat) else send + lat,
            first_token_time=send + ttft if ttft else None, chunk_times=chunks,
            prompt_tokens=at(ins, 0), output_tokens=at(outs, 0), output_text=at(texts, ""), error=err,
        ))
    skip = {"input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
            "generated_texts", "errors", "num_prompts", "request_rate", "burstiness",
            "ramp_up_start_rps", "ramp_up_end_rps"}
    # the metrics: numbers only (vllm writes no NaN, but a file edited elsewhere might)
    summary = {k: v for k, v in obj.items() if k not in skip and
               (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)))}
    summary.pop("max_concurrency", None)  # vllm's is the configured limit: kept in load below
    if obj.get("max_concurrent_requests") is not None:
        summary["max_concurrency"] = obj["max_concurrent_requests"]
    date = checked_text(field_of(obj, "date"), "date", 40)
    try:
        started = datetime.strptime(date, "%Y%m%d-%H%M%S").timestamp()
    except ValueError:
        raise Invalid(say("{where} is not a date like 20251130-101500", where="date")) from None
    rate = obj.get("request_rate", "inf")
    if rate != "inf":
        rate = checked_number(rate, "request_rate", 0, math.inf)
    label = checked_text(obj.get("label"), "label", 300, nullable=True)
    return RunResult(
        id=content_id(obj, "vb"),
        kind="vllm",
        scenario="vllm-bench-serve",
        label=label or f"vllm bench serve {date}",
        records=records,
        duration=checked_number(obj.get("duration") or 0.0, "duration", 0, REL_S),
        started_at=started,
        model=checked_text(obj.get("model_id") or "", "model_id", 1000),
        config={"tokenizer": obj["tokenizer_id"]} if obj.get("tokenizer_id") else {},
        load=Load.from_dict({k: v for k, v in {
            "backend": obj.get("backend"), "request_rate": float(rate) if rate != "inf" else None,
            "burstiness": obj.get("burstiness"), "max_concurrency": obj.get("max_concurrency"),
            "num_prompts": obj.get("num_prompts")}.items() if v is not None}),
        summary=Summary.from_dict(summary),
        extra=Notes(imported_from="vllm bench serve"),
    )
