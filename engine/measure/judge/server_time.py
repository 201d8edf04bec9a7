"""Where a run's time went, as the server saw it, against the client's TTFT and E2E latency.
See docs/measuring.md#server-time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.measure.judge import stats
from engine.digits import significant
from engine.messages import Message, mark, say
from engine.observe import histograms
from engine.observe.histograms import HISTOGRAMS, QUANTILES
from engine.results.records import KeptHistogram, ServerView

QUEUE_DOMINATES = 0.5  # the share of the client's mean TTFT spent waiting for a slot that makes it the story

# our key -> how a sentence names the server's phase
PHASES = {"queue": mark("waiting in the queue"), "prefill": mark("prefill"), "decode": mark("decode")}
MEANS = mark("Means are exact (the histograms' sums over their counts); percentiles are estimated from the "
             "histograms' buckets.")
# what "<" and ">" before a percentile mean (engine.observe.histograms.Percentile)
BOUNDS = mark("A percentile marked < is a bound, not an estimate: its values lay in the histogram's first bucket, "
              "or their sum allows no more; one marked > lay beyond the highest bucket. No percentile is placed "
              "past what was observed.")
# what the client's E2E holds beyond them: a stacked picture's last part
GAP = mark("HTTP, detokenising, streaming, the client")


@dataclass(frozen=True)
class ServerTime:
    """One run's time per request, means in seconds: the server's phases and the client's view."""

    queue: float | None
    prefill: float | None
    decode: float | None
    server_ttft: float | None
    server_e2e: float | None
    client_ttft: float | None
    client_e2e: float | None
    requests: float | None  # requests the server timed over the measured part (its e2e histogram's count)
    missing: tuple[str, ...]  # vLLM's histogram names it did not export

    @property
    def served(self) -> float | None:
        """The server's part of a request's time: queue + prefill + decode (None when one is missing)."""
        parts = (self.queue, self.prefill, self.decode)
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]

    @property
    def gap(self) -> float | None:
        """The client's mean E2E beyond the server's queue + prefill + decode: HTTP, tokenising and
        detokenising, streaming, the client."""
        return None if self.served is None or self.client_e2e is None else self.client_e2e - self.served

    @property
    def front(self) -> float | None:
        """Inside vLLM but outside its engine's steps: its own E2E beyond queue + prefill + decode (receiving
        the request, tokenising, detokenising, handing it between its processes); None without its E2E."""
        return None if self.served is None or self.server_e2e is None else max(0.0, self.server_e2e - self.served)

    @property
    def outside(self) -> float | None:
        """Outside the server: the client's E2E beyond the server's own (HTTP, streaming, the client)."""
        return None if self.server_e2e is None or self.client_e2e is None else max(0.0,
                                                                                   self.client_e2e - self.server_e2e)

    @property
    def queue_share(self) -> float | None:
        """The share of the client's mean TTFT that was waiting in the server's queue."""
        if self.queue is None or not self.client_ttft:
            return None
        return self.queue / self.client_ttft

    @property
    def queue_dominates(self) -> bool:
        return (self.queue_share or 0.0) > QUEUE_DOMINATES


def _mean(view: ServerView, key: str) -> float | None:
    h = view.histograms.get(key)
    return None if h is None else h.mean


def of(run: Any) -> ServerTime | None:
    """`run`'s time per request, server and client; None when the run has no server view (no /metrics, or a
    run saved before it was read)."""
    view = run.extra.server_view
    if view is None or not view.histograms:  # no /metrics, or none of the histograms on it
        return None
    recs = [r for r in stats.measured(getattr(run, "records", None) or []) if r.ok]
    ttfts = [r.ttft for r in recs if r.ttft is not None]
    e2es = [r.e2e for r in recs if r.e2e is not None]
    e2e = view.histograms.get("e2e")
    return ServerTime(_mean(view, "queue"), _mean(view, "prefill"), _mean(view, "decode"), _mean(view, "ttft"),
                      _mean(view, "e2e"), sum(ttfts) / len(ttfts) if ttfts else None,
                      sum(e2es) / len(e2es) if e2es else None, None if e2e is None else e2e.count,
                      tuple(HISTOGRAMS[k] for k in view.missing if k in HISTOGRAMS))


def _ms(s: float | None) -> str:
    return significant(None if s is None else s * 1000)


def percentile_ms(h: KeptHistogram, q: float) -> str:
    """A histogram's (as a run kept it) q-quantile in ms, marked where it is a bound ("< 0.60": below the first
    bucket's top or what the sum allows; "> 10,000": in the +Inf bucket); "–" without one."""
    p = histograms.percentile(h, q)
    if p is None:  # kept without its buckets: the stored estimate as it is
        return _ms(getattr(h, f"p{round(q * 100)}"))
    return p.shown(_ms(p.value))


def percentiles_said(h: KeptHistogram) -> Message:
    """A histogram's p50, p90 and p99 in one line (bucket estimates, bounds marked)."""
    return say("p50 {p50} ms · p90 {p90} ms · p99 {p99} ms (bucket estimates)", p50=percentile_ms(h, 0.5),
               p90=percentile_ms(h, 0.9), p99=percentile_ms(h, 0.99))


def bounded(run: Any) -> bool:
    """Whether any percentile of the run's server view is a bound rather than an estimate."""
    hists = run.extra.server_view.histograms.values() if run.extra.server_view else ()
    return any(p is not None and p.kind != "estimate" for h in hists for q in QUANTILES
               if (p := histograms.percentile(h, q)) is not None)


def said(run: Any) -> list[Message]:
    """The sentences under a run's server-time picture: where the time went, the gap named, the queue when it
    dominates, what the server did not export; one sentence when there is no server view at all."""
    t = of(run)
    if t is None:
        return [say("This server published no request histograms on /metrics (it is not vLLM, or its /metrics "
                    "were not readable), so where the time went inside it is not known: only the client's times "
                    "are shown.")]
    out: list[Message] = []
    if t.front is not None and t.outside is not None:  # the server timed its whole request too: split the gap
        out.append(say("Per request on average the server spent {queue} ms waiting in the queue, {prefill} ms in "
                       "prefill and {decode} ms in decode; {front} ms more inside vLLM but outside its engine's steps "
                       "(receiving the request, tokenising, detokenising, passing it between its processes), and "
                       "{outside} ms outside the server (the HTTP exchange, streaming, the client itself): {e2e} ms "
                       "in all, as the client timed it.", queue=_ms(t.queue), prefill=_ms(t.prefill),
                       decode=_ms(t.decode), front=_ms(t.front), outside=_ms(t.outside), e2e=_ms(t.client_e2e)))
    elif t.served is not None and t.client_e2e is not None:
        out.append(say("Per request on average the server spent {queue} ms waiting in the queue, {prefill} ms in "
                       "prefill and {decode} ms in decode; the client's E2E latency was {e2e} ms, so {gap} ms went to "
                       "what the server does not time: the HTTP exchange, tokenising and detokenising, streaming and "
                       "the client itself.", queue=_ms(t.queue), prefill=_ms(t.prefill), decode=_ms(t.decode),
                       e2e=_ms(t.client_e2e), gap=_ms(t.gap)))
    if t.queue_dominates:
        out.append(say("Most of the TTFT ({share:.0%}) was waiting for a slot: raise --max-num-seqs or add KV cache.",
                       share=t.queue_share))
    if t.missing:
        out.append(say("This server does not export {names}: those parts are not shown.", names=", ".join(t.missing)))
    out.append(MEANS)
    if bounded(run):
        out.append(BOUNDS)
    return out


def batch_said(run: Any) -> Message | None:
    """How full the server's engine steps were over the measured part (its tokens per step and the mean batch
    it decoded), beside the client's peak in flight; None without a server view."""
    view = run.extra.server_view
    if view is None:
        return None
    steps = view.steps
    if steps is None:
        return say("This server does not export vllm:iteration_tokens_total, so how full its batches were is not "
                   "known.")
    peak = stats.peak_in_flight(getattr(run, "records", None) or [])
    if not steps.mean_batch:  # unknown, or a pooling run's (embeddings, rerank): nothing decoded
        return say("The server ran {steps:,.0f} engine steps, {tokens:.1f} tokens each on average (prompt and "
                   "output); the client's peak in flight was {peak}.", steps=steps.count,
                   tokens=steps.mean_tokens, peak=peak)
    return say("The server ran {steps:,.0f} engine steps, {tokens:.1f} tokens each on average (prompt and output), "
               "and decoded {batch:.1f} requests per step on average; the client's peak in flight was {peak}.",
               steps=steps.count, tokens=steps.mean_tokens, batch=steps.mean_batch, peak=peak)
