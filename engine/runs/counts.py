"""The server's own counts around a run's measured part (`ServerCount`): output tokens, the prefix cache,
its histograms, read from one /metrics page at each end."""
from __future__ import annotations

import time

from engine.measure.judge.token_check import client_output_tokens
from engine.observe import engine_counters, histograms
from engine.observe.telemetry import (
    PREFIX_HITS,
    PREFIX_QUERIES,
    counter,
    generation_tokens,
    read_metrics_text,
)
from engine.results.records import Notes, RunResult
from engine.runs.target import Target


class ServerCount:
    """The server's own view of one run's measured part, from ONE read of its /metrics page when the
    warm-up is over (`start`, the load generator's on_measure) and one after the last request (`finish`; more only
    while its token counter has not yet counted every token the client received),
    so warm-up answers are left out: numbers a reader can check against the server's own.
    From the two pages: its count of the output tokens it generated (vllm:generation_tokens_total, to
    check the client's), the prefix cache's hits and queries, and the deltas of its per-request and
    per-step histograms (engine.observe.histograms.view: queue, prefill, decode, ... and tokens per engine
    step). Chat answers streamed meanwhile count on the server too: the run says so (its
    chat_requests_beside). A server without /metrics is measured all the same, its run unchecked."""

    SETTLE_S = 0.05  # between two reads that must agree: a counter that still moves has not settled
    READS = 10

    def __init__(self, target: Target) -> None:
        self.target = target
        self.started = False
        self.before: float | None = None
        self.page_before: str | None = None
        self.page_after: str | None = None  # the settled page after the run: its served count too (Runner._keep)

    def read(self, expected: float | None = None) -> tuple[str | None, float | None]:
        """The /metrics page once the token counter stops moving (vLLM may count a step's tokens a moment after
        it sent them, and observes a request's histograms as it finishes; chat traffic keeps it moving: then
        the last read) and that counter; (None, None) without /metrics. A first read whose counter is already
        `expected` (every token the client received counted) has settled: no second read, so the command
        returns sooner after its last answer."""
        t = self.target
        if t.endpoint is not None and not t.endpoint.metrics:
            return None, None  # discovery found no readable /metrics: no read to wait for
        page = read_metrics_text(t.base_url, t.api_key)
        value = None if page is None else generation_tokens(page, t.model)
        if value is not None and expected is not None and value == expected:
            return page, value
        for _ in range(self.READS if value is not None else 0):
            time.sleep(self.SETTLE_S)
            again_page = read_metrics_text(t.base_url, t.api_key)
            again = None if again_page is None else generation_tokens(again_page, t.model)
            if again is None or again == value:
                break
            page, value = again_page, again
        return page, value

    def start(self) -> None:
        self.started = True
        self.page_before, self.before = self.read()

    def finish(self, result: RunResult) -> RunResult:
        """`result`'s notes given both counts (or why there is no server count) and the server's view."""
        if not self.started:  # the run ended before it measured: nothing to compare
            return result
        notes = result.extra
        notes.token_count.client = client_output_tokens(result.records)
        expected = None if self.before is None else self.before + notes.token_count.client
        page, after = self.read(expected) if self.page_before is not None else (None, None)
        self.page_after = page
        if self.before is None or after is None:
            notes.token_count.missing = "no-metrics"
        elif after < self.before:
            notes.token_count.missing = "counter-reset"
        else:
            notes.token_count.server = round(after - self.before)
        if self.page_before is not None and page is not None:
            self._prefix_cache(notes, self.page_before, page)
            view = histograms.view(self.page_before, page, self.target.model, notes.token_count.server)
            view.spec_decode, view.estimated = engine_counters.view(self.page_before, page, self.target.model)
            notes.server_view = view
        return result

    def _prefix_cache(self, notes: Notes, before: str, after: str) -> None:
        """The prefix cache's hits and queries over the measured part (from the settled pages: a request's
        lookup is counted when it is scheduled, long before its last token)."""
        m = self.target.model
        h0, q0 = counter(before, PREFIX_HITS, m), counter(before, PREFIX_QUERIES, m)
        h1, q1 = counter(after, PREFIX_HITS, m), counter(after, PREFIX_QUERIES, m)
        if h0 is None or q0 is None or h1 is None or q1 is None:
            return
        if h1 >= h0 and q1 >= q0:  # a restarted server's counters start again: no count then
            notes.prefix_cache.hits, notes.prefix_cache.queries = round(h1 - h0), round(q1 - q0)
