"""Why a run's requests failed, in sentences (what happened, what to do), grouped by cause."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from engine.measure.judge.stats import measured
from engine.messages import Message, mark, say, say_n
from engine.results.records import RequestRecord

# Each rule reads one kind of RequestRecord.error: vLLM's own refusals (quoted by loadgen as
# "HTTP <code>: <message>") and the sentences engine.measure.load.request.describe / Requester write. A rule
# gives (group key, what happened, what to do): what happened is a function of how many requests it
# happened to, returning a Message ("was refused ..." for one, "were refused ..." for more).

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


# Causes of requests that never went out (a multi-turn chat's turns after a failed one, requests a stopped run
# had not sent yet): counted apart from those sent, so a summary's counts add up to the requests planned.
NEVER_SENT = ("not-sent", "stopped")
MOST_CAUSES = 6  # causes said one by one; the rest in one sentence

_CLIENT_WHAT = {"open files": mark("open files"), "local ports": mark("local ports"), "memory": mark("memory")}
_CLIENT_TODO = {
    "open files": mark("raise this client's open-file limit (ulimit -n 65536 in the shell that starts the lab) or "
                       "send fewer requests at once; the server is not the cause"),
    "local ports": mark("send fewer requests at once, or wait a minute for closed connections to give their ports "
                        "back; the server is not the cause"),
    "memory": mark("send fewer requests at once or free memory on this machine; the server is not the cause"),
}


def _client(m: re.Match) -> tuple[str, Callable[[int], str], str]:
    what = m["what"]
    return (f"client:{what}",
            lambda n: say_n("could not be sent because this client (the load generator, not the server) ran out of "
                            "{what} ({why})",
                            "could not be sent because this client (the load generator, not the server) ran out of "
                            "{what} ({why})", n, what=_CLIENT_WHAT[what], why=m["why"]),
            _CLIENT_TODO[what])


_FAILURE_RULES: list[tuple[re.Pattern, Any]] = [
    (re.compile(r"^not sent: turn \d+ of its conversation failed"),
     lambda m: ("not-sent", lambda n: say_n("was never sent because an earlier turn of its conversation failed (each "
                                            "turn carries the answers before it)",
                                            "were never sent because an earlier turn of their conversation failed "
                                            "(each turn carries the answers before it)", n),
                say("the earlier turn's cause is said beside this"))),
    (re.compile(r"^cancelled before it was sent$"),
     lambda m: ("stopped", lambda n: say_n("was never sent because the run was stopped",
                                           "were never sent because the run was stopped", n),
                say("the run was stopped and the finished requests were kept"))),
    (re.compile(r"^this client ran out of (?P<what>open files|local ports|memory) \((?P<why>.*)\)$", re.S), _client),
    (re.compile(r"the server kept streaming past the (?P<asked>\d+) tokens asked for \((?P<got>\d+) so far\) "
                r"and had not ended within (?P<s>[\d.]+) s"),
     lambda m: ("endless", lambda n: say_n("kept streaming past the {asked} tokens asked for and had not ended "
                                           "after {s} s", "kept streaming past the {asked} tokens asked for and had "
                                           "not ended after {s} s", n, asked=m["asked"], s=m["s"]),
                say("that is the server's doing, not the load's (it ignores max_tokens or never ends its stream), so "
                    "check its log and version"))),
    # vLLM's refusals of a request longer than its max-model-len
    (re.compile(r"max_tokens=(?P<mt>\d+) cannot be greater than max_model_len=(?P<mml>\d+)"),
     lambda m: (f"max_tokens>{m['mml']}:{m['mt']}",
                lambda n: say_n("was refused because the prompt plus {mt} output tokens exceed the server's "
                                "max-model-len of {mml}",
                                "were refused because the prompt plus {mt} output tokens exceed the server's "
                                "max-model-len of {mml}", n, mt=m["mt"], mml=m["mml"]),
                say("lower the max tokens per answer or restart the server with a longer max-model-len"))),
    (re.compile(r"maximum context length is (?P<mml>\d+) tokens.*prompt contains", re.S),
     lambda m: (f"prompt>{m['mml']}",
                lambda n: say_n("was refused because the prompt alone is longer than the server's max-model-len of "
                                "{mml} tokens",
                                "were refused because the prompt alone is longer than the server's max-model-len of "
                                "{mml} tokens", n, mml=m["mml"]),
                say("use shorter prompts or restart the server with a longer max-model-len"))),
    (re.compile(r"maximum context length is (?P<mml>\d+) tokens", re.S),
     lambda m: (f"context>{m['mml']}",
                lambda n: say_n("was refused because prompt and answer together exceed the server's max-model-len of "
                                "{mml} tokens",
                                "were refused because prompt and answer together exceed the server's max-model-len of "
                                "{mml} tokens", n, mml=m["mml"]),
                say("lower the max tokens per answer or restart the server with a longer max-model-len"))),
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
     lambda m: ("timeout", lambda n: say("did not finish within {s} s, the deadline of its answer (30 s, plus 0.5 s "
                                         "per token asked for)", s=m["s"]),
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


def _groups(records: Iterable[RequestRecord], planned: int | None) -> tuple[dict[str, list[Any]], int]:
    """The failed measured requests by cause ({key: [count, what, todo]}, first seen first), the requests a
    finished run planned but never recorded (stopped before they went out) among them; and the total they are
    counted out of (the planned requests where known)."""
    recs = measured(records)
    groups: dict[str, list[Any]] = {}
    for r in recs:
        if r.error is not None:
            key, what, todo = _explain(r.error)
            groups.setdefault(key, [0, what, todo])[0] += 1
    total = len(recs)
    if planned is not None and planned > total:
        _, what, todo = _explain("cancelled before it was sent")
        groups.setdefault("stopped", [0, what, todo])[0] += planned - total
        total = planned
    return groups, total


def planned_of(run) -> int | None:
    """The requests a finished run planned (Notes.load_client.planned_requests; None for a live or older one)."""
    return run.extra.load_client.planned_requests


def run_causes(run) -> list[tuple[int, str]]:
    """failure_causes of a run, counted out of the requests it planned (those it never sent said too)."""
    return failure_causes(run.records, planned_of(run))


@dataclass(frozen=True)
class Counts:
    """A run's requests as they add up: planned = answered + failed (sent, refused or broken) + never sent +
    in flight."""

    planned: int
    answered: int
    failed: int
    never_sent: int
    in_flight: int

    @property
    def said(self) -> Message:
        return say("{planned} planned: {ok} answered, {failed} failed, {never} never sent", planned=self.planned,
                   ok=self.answered, failed=self.failed, never=self.never_sent)


def counts(run) -> Counts:
    """How a run's measured requests add up to what it planned (its records' count where it does not say)."""
    recs = measured(run.records)
    groups, total = _groups(recs, planned_of(run))
    never = sum(groups[k][0] for k in NEVER_SENT if k in groups)
    ok = sum(r.ok for r in recs)
    open_ = sum(r.error is None and r.end_time is None for r in recs)
    return Counts(planned=total, answered=ok, failed=sum(g[0] for g in groups.values()) - never, never_sent=never,
                  in_flight=open_)


def counted_repeats(runs) -> list:
    """The repeats whose numbers enter their statistics: those that answered every request they planned (a repeat
    cut short by a dying server would enter as a zero, or as a fast run of a few requests), and never a stored run
    that answered none (History's RunRow.failed: one saved before repeats recorded their failure, or a run alone)."""
    return [r for r in runs if not r.extra.repeat.failed and not getattr(r, "failed", False)]


def failure_causes(records: Iterable[RequestRecord], planned: int | None = None) -> list[tuple[int, str]]:
    """The measured requests that failed or were never sent, grouped by cause, most frequent first: (count,
    sentence), e.g. (7, "7 of 10 requests were refused: the prompt plus 3000 output tokens exceed the server's
    max-model-len of 2048: lower the max tokens per answer or restart ..."). Requests still in flight are neither
    counted nor failed. With `planned` (a finished run's), requests it never recorded count as never sent, and
    every count is out of it."""
    groups, total = _groups(records, planned)
    out: list[tuple[int, str]] = []
    ranked = sorted(groups.values(), key=lambda g: -g[0])  # stable: first seen first on ties
    for n, what, todo in ranked[:MOST_CAUSES]:
        if n == total:
            who = say("The request") if total == 1 else say("All {total} requests", total=total)
        else:
            who = say("{n} of {total} requests", n=n, total=total)
        out.append((n, say("{who} {what}: {todo}.", who=who, what=what(n), todo=todo)))
    if rest := ranked[MOST_CAUSES:]:  # a sentence per cause, but never a wall of them
        n = sum(g[0] for g in rest)
        out.append((n, say("{n} of {total} requests failed for {k} other causes: each request's own error is kept "
                           "with the run (its export or the CLI's request log).", n=n, total=total, k=len(rest))))
    return out
