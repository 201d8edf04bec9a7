"""Metrics from request records, defined as vLLM's `vllm bench serve` defines them.

Source of the definitions: vllm/benchmarks/serve.py `calculate_metrics` and
vllm/benchmarks/lib/endpoint_request_func.py (vLLM 0.32):
- a request counts as completed when it succeeded (`RequestRecord.ok`); the others are failed;
- TTFT = first content chunk - send; E2EL = end - send;
- TPOT = (E2EL - TTFT) / (output_tokens - 1), only for requests with more than one output token
  (goodput treats a 1-token request's TPOT as 0, as vLLM does);
- ITL = every gap between consecutive content chunks of a request, pooled over requests;
- throughputs divide by the run duration; mean, median, population std and linearly interpolated
  percentiles (numpy's default) are reported in milliseconds under vLLM's key names.
Chunks are the content chunks the load generator (engine.measure.request) records; it does not count
vLLM's chat preamble (the role-only chunk sent together with the first token) where `vllm bench serve`
does, which spares ITL one near-zero gap per request and leaves TTFT unchanged.
Where vLLM would report 0 for a metric with no samples (e.g. TPOT when every answer is one token)
this module reports None, so a chart shows a gap rather than a false zero. Nothing here is NaN.
The keys, with their labels and units, are catalogued in engine.metrics.
"""
from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.messages import say, say_n
from engine.metrics import DISTRIBUTIONS
from engine.results.records import Notes, RequestRecord, Summary

DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)
_SLO_KEYS = ("ttft", "tpot", "e2el")


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _pword(p: float) -> str:
    """vLLM's key spelling: p99, p99.9."""
    return str(int(p)) if int(p) == p else str(p)


def _distribution(name: str, seconds: Sequence[float], percentiles: Iterable[float]) -> dict[str, float | None]:
    """mean/median/std/pXX of `seconds`, in ms, under vLLM's key names; None when empty."""
    ms = [s * 1000.0 for s in seconds]
    out: dict[str, float | None] = {
        f"mean_{name}_ms": statistics.fmean(ms) if ms else None,
        f"median_{name}_ms": statistics.median(ms) if ms else None,
        f"std_{name}_ms": statistics.pstdev(ms) if ms else None,
    }
    for p in percentiles:
        out[f"p{_pword(p)}_{name}_ms"] = percentile(ms, p)
    return out


def measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The records that count: warm-up requests excluded."""
    return [r for r in records if not r.warmup]


def itls(r: RequestRecord) -> list[float]:
    """Gaps between consecutive content chunks of one request, in seconds."""
    ts = r.chunk_times
    return [b - a for a, b in zip(ts, ts[1:])]


def tpot(r: RequestRecord) -> float | None:
    """(E2E - TTFT) / (N - 1) seconds for N > 1 output tokens, else None."""
    if r.output_tokens > 1 and r.ttft is not None and r.e2e is not None:
        return (r.e2e - r.ttft) / (r.output_tokens - 1)
    return None


def is_good(r: RequestRecord, slo_ms: dict[str, float]) -> bool:
    """Whether a request completed within every given SLO (keys ttft/tpot/e2el, milliseconds), as
    `vllm bench serve --goodput` judges it: a value on the limit counts, compared in seconds as vLLM
    compares (in ms, 2.007 s * 1000 would land just over a 2007 ms limit), and a 1-token answer's TPOT
    is 0. (A completed request has a first token: the load generator fails an answer without one.)"""
    if not r.ok:
        return False
    values = {"ttft": r.ttft, "tpot": tpot(r) or 0.0, "e2el": r.e2e}
    for key, limit in slo_ms.items():
        v = values.get(key)
        if v is None or not limit / 1000.0 >= v:
            return False
    return True


def good_requests(records: Iterable[RequestRecord], slo_ms: dict[str, float]) -> int:
    """How many measured requests completed within every given SLO: goodput's numerator."""
    return sum(is_good(r, slo_ms) for r in measured(records))


def in_flight_series(records: Iterable[RequestRecord], warmup: bool = False) -> list[tuple[float, int]]:
    """Step series (t, requests in flight just after t), one point per send or end, of the measured
    requests (`warmup`: of the warm-up's instead).

    Failed requests count while they were in flight; a request still open (no end) stays in
    flight. At equal times an end is applied before a send, so back-to-back requests do not
    count as overlapping."""
    events: list[tuple[float, int]] = []
    for r in (r for r in records if r.warmup == warmup):
        events.append((r.send_time, +1))
        if r.end_time is not None:
            events.append((r.end_time, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    out: list[tuple[float, int]] = []
    n = 0
    for t, d in events:
        n += d
        if out and out[-1][0] == t:
            out[-1] = (t, n)
        else:
            out.append((t, n))
    return out


def peak_in_flight(records: Iterable[RequestRecord], warmup: bool = False) -> int:
    """The most measured requests (`warmup`: warm-up requests) that were in flight at once."""
    return max((n for _, n in in_flight_series(records, warmup)), default=0)


def token_arrivals(r: RequestRecord) -> list[tuple[float, float]]:
    """(time, tokens) for one request: its output tokens attributed to chunk arrival times.

    When the server's count differs from the number of chunks (a chunk may carry several tokens),
    the count is spread evenly over the chunks. With no chunk times, all land at the end."""
    n = r.output_tokens or len(r.chunk_times)
    if n <= 0:
        return []
    if r.chunk_times:
        share = n / len(r.chunk_times)
        return [(t, share) for t in r.chunk_times]
    return [(r.end_time, float(n))] if r.end_time is not None else []


def tokens_per_second_series(records: Iterable[RequestRecord], bucket_s: float = 1.0) -> list[tuple[float, float]]:
    """Output tokens per second over the run: (bucket start s, tok/s), every bucket from 0 up to
    the last token, zeros included, so the line is continuous. Warm-up records are skipped."""
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    buckets: dict[int, float] = {}
    for r in measured(records):
        for t, n in token_arrivals(r):
            k = max(0, math.floor(t / bucket_s))
            buckets[k] = buckets.get(k, 0.0) + n
    if not buckets:
        return []
    return [(k * bucket_s, buckets.get(k, 0.0) / bucket_s) for k in range(max(buckets) + 1)]


def _vllm_peak_output(records: Sequence[RequestRecord]) -> float:
    """vLLM's `max_output_tokens_per_s`: most tokens in one 1-s bucket counted from the first
    successful send, one token per content chunk (vLLM rebuilds token times from TTFT and ITLs)."""
    if not records:
        return 0.0
    t0 = min(r.send_time for r in records)
    counts: dict[int, int] = {}
    for r in records:
        for t in r.chunk_times:
            k = int(t - t0)
            counts[k] = counts.get(k, 0) + 1
    return float(max(counts.values(), default=0))


def summarize(
    records: Iterable[RequestRecord],
    duration: float,
    goodput_slo: dict[str, float] | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> Summary:
    """`vllm bench serve`'s metrics from measured records (warm-up skipped).

    `goodput_slo` maps ttft/tpot/e2el to limits in ms (vLLM's `--goodput`); without it
    request_goodput is None. Besides vLLM's keys: in_flight (requests not finished yet, for live
    snapshots; neither completed nor failed), max_concurrency (observed peak in flight),
    mean_latency_s (mean E2E) and total_latency_s (sum of E2E: the "serial sum", the wall time
    the same requests would take one after another)."""
    recs = measured(records)
    done = [r for r in recs if r.ok]
    open_ = sum(r.error is None and r.end_time is None for r in recs)  # live snapshots: still running
    slo = {k: float(v) for k, v in (goodput_slo or {}).items() if k in _SLO_KEYS}
    dur = duration if duration and duration > 0 else 0.0

    def per_s(x: float) -> float:
        return x / dur if dur else 0.0

    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    e2els = [r.e2e for r in done if r.e2e is not None]
    samples = {
        "ttft": [r.ttft for r in done if r.ttft is not None],
        "tpot": [t for t in (tpot(r) for r in done) if t is not None],
        "itl": [g for r in done for g in itls(r)],
        "e2el": e2els,
    }
    out: dict[str, Any] = {
        "duration": dur,
        "completed": len(done),
        "failed": len(recs) - len(done) - open_,
        "in_flight": open_,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(done)),
        "request_goodput": per_s(good_requests(done, slo)) if slo else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "max_output_tokens_per_s": _vllm_peak_output(done),
        "max_concurrency": peak_in_flight(recs),
        "mean_latency_s": statistics.fmean(e2els) if e2els else None,
        "total_latency_s": sum(e2els),
        "mean_cached_tokens": statistics.fmean(cached) if (cached := [r.cached_tokens for r in done
                                                                     if r.cached_tokens is not None]) else None,
    }
    for name in DISTRIBUTIONS:
        out.update(_distribution(name, samples[name], percentiles))
    return Summary.from_dict(out)


def per_request(records: Iterable[RequestRecord]) -> list[dict[str, Any]]:
    """One row per measured request (for tables and CSV): ids, outcome, latencies in ms."""
    rows = []
    for r in measured(records):
        t = tpot(r)
        rows.append({
            "index": r.index,
            "ok": r.ok,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "ttft_ms": None if r.ttft is None else r.ttft * 1000.0,
            "tpot_ms": None if t is None else t * 1000.0,
            "e2el_ms": None if r.e2e is None else r.e2e * 1000.0,
            "error": r.error,
        })
    return rows


# -- why requests failed ------------------------------------------------------------------------
# Each rule reads one kind of RequestRecord.error: vLLM's own refusals (quoted by loadgen as
# "HTTP <code>: <message>") and the sentences engine.measure.request.describe / Requester write. A rule
# gives (group key, what happened, what to do): what happened is a function of how many requests it
# happened to, returning a Message ("was refused ..." for one, "were refused ..." for more).

def _refused_tokens(m: re.Match) -> tuple[str, Callable[[int], str], str]:
    mt, mml = m["mt"], m["mml"]
    return (f"max_tokens>{mml}:{mt}",
            lambda n: say_n("was refused because the prompt plus {mt} output tokens exceed the server's "
                            "max-model-len of {mml}",
                            "were refused because the prompt plus {mt} output tokens exceed the server's "
                            "max-model-len of {mml}", n, mt=mt, mml=mml),
            say("lower the max tokens per answer or restart the server with a longer max-model-len"))


def _refused_prompt(m: re.Match) -> tuple[str, Callable[[int], str], str]:
    mml = m["mml"]
    return (f"prompt>{mml}",
            lambda n: say_n("was refused because the prompt alone is longer than the server's max-model-len of "
                            "{mml} tokens",
                            "were refused because the prompt alone is longer than the server's max-model-len of "
                            "{mml} tokens", n, mml=mml),
            say("use shorter prompts or restart the server with a longer max-model-len"))


def _refused_context(m: re.Match) -> tuple[str, Callable[[int], str], str]:
    mml = m["mml"]
    return (f"context>{mml}",
            lambda n: say_n("was refused because prompt and answer together exceed the server's max-model-len of "
                            "{mml} tokens",
                            "were refused because prompt and answer together exceed the server's max-model-len of "
                            "{mml} tokens", n, mml=mml),
            say("lower the max tokens per answer or restart the server with a longer max-model-len"))


def _no_model(m: re.Match) -> tuple[str, Callable[[int], str], str]:
    served, name = (m["valid"] or "").strip().rstrip("."), m["name"]
    return (f"model:{name}",
            lambda n: say_n("was refused because the server serves no model named '{name}'",
                            "were refused because the server serves no model named '{name}'", n, name=name),
            say("send the name it serves ({served})", served=served) if served else
            say("send the name it serves (GET /v1/models lists it)"))


def _http(m: re.Match) -> tuple[str, Callable[[int], str], str]:
    code, msg = int(m["code"]), m["msg"].strip()
    msg = re.sub(r"\s*\(parameter=.*\)$", "", msg).rstrip(".")  # vLLM repeats the parameter it names
    if code == 401:
        return ("http:401",
                lambda n: say_n("was refused because the server wants an API key and none or a wrong one was sent",
                                "were refused because the server wants an API key and none or a wrong one was sent",
                                n),
                say("use the key the server was started with"))
    if code >= 500:
        return (f"http:{code}:{msg}",
                lambda n: say("failed inside the server (HTTP {code}: {msg})", code=code, msg=msg),
                say("look at the server's log, restart it if it is unhealthy, and run again"))
    return (f"http:{code}:{msg}",
            lambda n: say_n("was refused by the server (HTTP {code}: {msg})",
                            "were refused by the server (HTTP {code}: {msg})", n, code=code, msg=msg),
            say("change the setting it names and run again"))


_FAILURE_RULES: list[tuple[re.Pattern, Any]] = [
    (re.compile(r"max_tokens=(?P<mt>\d+) cannot be greater than max_model_len=(?P<mml>\d+)"), _refused_tokens),
    (re.compile(r"maximum context length is (?P<mml>\d+) tokens.*prompt contains", re.S), _refused_prompt),
    (re.compile(r"maximum context length is (?P<mml>\d+) tokens", re.S), _refused_context),
    (re.compile(r"HTTP 404: The model `(?P<name>[^`]*)` does not exist\.(?: Valid aliases: (?P<valid>.*))?", re.S),
     _no_model),
    (re.compile(r"HTTP (?P<code>\d{3}): (?P<msg>.*)", re.S), _http),
    (re.compile(r"could not connect to (?P<url>\S+) in time"),
     lambda m: ("connect-timeout", lambda n: say("could not connect to the server at {url} in time", url=m["url"]),
                say("check that the server is up and not overloaded, then run again"))),
    (re.compile(r"could not connect to (?P<url>\S+)"),
     lambda m: ("connect", lambda n: say("found nothing listening at {url}", url=m["url"]),
                say("start the server (it may have stopped or crashed) and run again"))),
    (re.compile(r"closed the connection mid-answer|connection to the server broke|stream ended before \[DONE\]"),
     lambda m: ("cut", lambda n: say_n("was cut off mid-answer when the server closed the connection",
                                       "were cut off mid-answer when the server closed the connection", n),
                say("it probably stopped or crashed, so check its state and log, restart it and run again"))),
    (re.compile(r"sent nothing for (?P<s>[\d.]+) s"),
     lambda m: ("read-timeout", lambda n: say("got no data from the server for {s} s", s=m["s"]),
                say("it is stuck or overloaded, so send fewer requests at once or check its log"))),
    (re.compile(r"no complete answer within (?P<s>[\d.]+) s"),
     lambda m: ("timeout", lambda n: say("did not finish within {s} s", s=m["s"]),
                say("lower the max tokens per answer or the requests in flight"))),
    (re.compile(r"^cancelled$"),
     lambda m: ("cancelled", lambda n: say_n("was cancelled before finishing", "were cancelled before finishing", n),
                say("the run was stopped and the finished requests were kept"))),
    (re.compile(r"reported an error mid-stream: (?P<msg>.*)", re.S),
     lambda m: (f"mid:{m['msg']}",
                lambda n: say("failed mid-answer with the server's error '{error}'", error=_clip(m["msg"])),
                say("look at the server's log and run again"))),
    (re.compile(r"answered without a single token"),
     lambda m: ("empty", lambda n: say("got an answer without a single token"),
                say("check the prompt and the model: there was nothing to measure"))),
    (re.compile(r"event that is not JSON"),
     lambda m: ("not-json", lambda n: say("got an answer that is not an OpenAI-style stream"),
                say("check that the URL points at a vLLM or other OpenAI-compatible server"))),
]


def _clip(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _explain(error: str) -> tuple[str, Callable[[int], str], str]:
    for pattern, build in _FAILURE_RULES:
        if m := pattern.search(error):
            return build(m)
    return (f"other:{error}", lambda n: say("failed ({error})", error=_clip(error)),
            say("look at the server's log and run again"))


def failure_cause(error: str) -> str:
    """One failed request's error as a sentence: what happened and what to do."""
    _, what, todo = _explain(error)
    return say("This request {what}: {todo}.", what=what(1), todo=todo)


def failure_causes(records: Iterable[RequestRecord]) -> list[tuple[int, str]]:
    """The measured requests that failed, grouped by cause, most frequent first: (count, sentence),
    e.g. (7, "7 of 10 requests were refused: the prompt plus 3000 output tokens exceed the server's
    max-model-len of 2048: lower the max tokens per answer or restart ..."). Requests still in
    flight are neither counted nor failed."""
    recs = measured(records)
    groups: dict[str, list[Any]] = {}
    for r in recs:
        if r.error is not None:
            key, what, todo = _explain(r.error)
            groups.setdefault(key, [0, what, todo])[0] += 1
    total = len(recs)
    out = []
    for n, what, todo in sorted(groups.values(), key=lambda g: -g[0]):  # stable: first seen first on ties
        if n == total:
            who = say("The request") if total == 1 else say("All {total} requests", total=total)
        else:
            who = say("{n} of {total} requests", n=n, total=total)
        out.append((n, say("{who} {what}: {todo}.", who=who, what=what(n), todo=todo)))
    return out


# How far the server's and the client's output-token counts may differ before a run says so.
TOKEN_TOLERANCE = 0.03


@dataclass(frozen=True)
class TokenCheck:
    """A run's output tokens as the server counted them (vllm:generation_tokens_total over the
    measured part) against the client's count of the same requests."""

    server: int | None
    client: int | None
    ratio: float | None  # server / client; None without both counts (or when the client counted none)
    level: str  # "ok" | "warn" (they differ by more than TOKEN_TOLERANCE) | "unchecked" (no server count)
    sentences: tuple[str, ...]  # what to say, in order


def client_output_tokens(records: Iterable[RequestRecord]) -> int:
    """The output tokens the client counted over a run's measured requests, failed ones' partial
    answers included (the server counts those too)."""
    return sum(r.output_tokens for r in measured(records))


def token_check(notes: Notes) -> TokenCheck | None:
    """What a run's notes say about its token counts: the server's against the client's with their
    ratio, whether chat answers streamed during the run (the server counts those too), and a warning
    when they differ by more than TOKEN_TOLERANCE; that there was nothing to check against when the
    server publishes no /metrics. None for a run that never tried (older runs, the naive baseline,
    imported ones)."""
    if notes.server_count_missing == "no-metrics":
        return TokenCheck(None, notes.client_output_tokens, None, "unchecked", (
            say("The server publishes no vLLM /metrics, so the client's count of output tokens could not be "
                "checked against the server's own."),))
    if notes.server_count_missing == "counter-reset":
        return TokenCheck(None, notes.client_output_tokens, None, "unchecked", (
            say("The server's output-token counter went backwards during the run (the server restarted), so the "
                "client's count could not be checked against it."),))
    server, client = notes.server_output_tokens, notes.client_output_tokens
    if server is None or client is None:
        return None
    chats = notes.chat_requests_beside
    said = []
    if client:
        ratio = server / client
        said.append(say("The server counted {server:,} output tokens, the client {client:,} (ratio {ratio:.2f}).",
                        server=server, client=client, ratio=ratio))
    else:
        ratio = None
        said.append(say("The server counted {server:,} output tokens, the client none.", server=server))
    gap = abs(server - client) / client if client else float(server > 0)  # of the client's count
    differs = gap > TOKEN_TOLERANCE
    if chats:
        said.append(say_n("The server's count includes the {n} chat answer streamed during the run.",
                          "The server's count includes the {n} chat answers streamed during the run.", chats))
    if differs:
        if chats and server > client:
            said.append(say("They differ by {gap:.1%}, more than {tolerance:.0%}, likely because of the chat "
                            "answers, which the server counts too.", gap=gap, tolerance=TOKEN_TOLERANCE))
        elif notes.cancelled:
            said.append(say("They differ by {gap:.1%}, more than {tolerance:.0%}, likely because the run was "
                            "cancelled: the server counts what it generated for answers the client stopped "
                            "reading.", gap=gap, tolerance=TOKEN_TOLERANCE))
        elif notes.endpoint and server > client:  # a server at a URL is often shared: it counts all its clients
            said.append(say("They differ by {gap:.1%}, more than {tolerance:.0%}, likely because {url} served other "
                            "clients meanwhile, whose tokens it counts too: measure it while it is otherwise idle to "
                            "check the client's count.", gap=gap, tolerance=TOKEN_TOLERANCE, url=notes.endpoint))
        else:
            said.append(say("They differ by {gap:.1%}, more than {tolerance:.0%}: the client's token counts, and "
                            "the throughput made from them, are in doubt.", gap=gap, tolerance=TOKEN_TOLERANCE))
    return TokenCheck(server, client, ratio, "warn" if differs else "ok", tuple(said))


@dataclass(frozen=True)
class WarmupCost:
    """What a run's warm-up took (its requests are kept with the run, not counted): how many, how long
    from its first send to its last answer, and its mean TTFT against the measured part's."""

    requests: int
    seconds: float
    ttft_s: float | None  # mean over the warm-up's answered requests
    measured_ttft_s: float | None
    said: str


def warmup_cost(records: Sequence[RequestRecord]) -> WarmupCost | None:
    """The warm-up's cost from its records (warmup=True, on the measured part's clock); None without one."""
    warm = [r for r in records if r.warmup]
    if not warm:
        return None
    ends = [r.end_time for r in warm if r.end_time is not None]
    seconds = max(0.0, max(ends, default=0.0) - min(r.send_time for r in warm))

    def mean_ttft(recs: Iterable[RequestRecord]) -> float | None:
        ttfts = [r.ttft for r in recs if r.ok and r.ttft is not None]
        return statistics.fmean(ttfts) if ttfts else None

    ttft, measured_ttft = mean_ttft(warm), mean_ttft(measured(records))
    said = (say_n("The warm-up ({n} request, {seconds:.1f} s, TTFT {ttft:.2f} s) was not counted; the measured "
                  "batch's TTFT was {measured:.2f} s.",
                  "The warm-up ({n} requests, {seconds:.1f} s, TTFT {ttft:.2f} s) was not counted; the measured "
                  "batch's TTFT was {measured:.2f} s.", len(warm), seconds=seconds, ttft=ttft,
                  measured=measured_ttft)
            if ttft is not None and measured_ttft is not None else
            say_n("The warm-up ({n} request, {seconds:.1f} s) was not counted.",
                  "The warm-up ({n} requests, {seconds:.1f} s) was not counted.", len(warm), seconds=seconds))
    return WarmupCost(len(warm), seconds, ttft, measured_ttft, said)


def cost_per_million_output_tokens(price_per_gpu_hour: float | None, duration_s: float | None,
                                   output_tokens: int | None) -> float | None:
    """What a million output tokens cost at this rate: price / 3600 x duration / output tokens x 1e6.

    Assumes the one rate pays for the whole machine the server ran on (several GPUs: give their sum)
    for the measured part's wall time only, and that nothing else ran on it meanwhile: a warm-up,
    idle time between runs and the server's start are not charged. None when there is no price (the
    field left blank), no time or no output tokens to spread it over."""
    if price_per_gpu_hour is None or not duration_s or not output_tokens or price_per_gpu_hour < 0:
        return None
    return price_per_gpu_hour / 3600 * duration_s / output_tokens * 1e6
