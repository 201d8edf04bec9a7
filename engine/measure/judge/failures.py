"""Why a run's requests failed, in sentences (what happened, what to do), grouped by cause."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from engine.measure.judge.stats import measured
from engine.messages import say, say_n
from engine.results.records import RequestRecord

# Each rule reads one kind of RequestRecord.error: vLLM's own refusals (quoted by loadgen as
# "HTTP <code>: <message>") and the sentences engine.measure.load.request.describe / Requester write. A rule
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
