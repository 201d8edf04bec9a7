"""The server's count of a run's output tokens against the client's: whether the throughput can be trusted."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.measure.judge.stats import measured
from engine.messages import say, say_n
from engine.results.records import Notes, RequestRecord

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
    if notes.token_count.missing == "no-metrics":
        return TokenCheck(None, notes.token_count.client, None, "unchecked", (
            say("The server publishes no vLLM /metrics, so the client's count of output tokens could not be "
                "checked against the server's own."),))
    if notes.token_count.missing == "counter-reset":
        return TokenCheck(None, notes.token_count.client, None, "unchecked", (
            say("The server's output-token counter went backwards during the run (the server restarted), so the "
                "client's count could not be checked against it."),))
    server, client = notes.token_count.server, notes.token_count.client
    if server is None or client is None:
        return None
    chats = notes.beside.chats
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
        elif notes.server.endpoint and server > client:  # a server at a URL is often shared: it counts all its clients
            said.append(say("They differ by {gap:.1%}, more than {tolerance:.0%}, likely because {url} served other "
                            "clients meanwhile, whose tokens it counts too: measure it while it is otherwise idle to "
                            "check the client's count.", gap=gap, tolerance=TOKEN_TOLERANCE, url=notes.server.endpoint))
        else:
            said.append(say("They differ by {gap:.1%}, more than {tolerance:.0%}: the client's token counts, and "
                            "the throughput made from them, are in doubt.", gap=gap, tolerance=TOKEN_TOLERANCE))
    return TokenCheck(server, client, ratio, "warn" if differs else "ok", tuple(said))
