"""How the lab writes the Python behind a run: literals as the lab quotes them, the client aimed at a server, and
comments in the viewer's language (the snippets of `load.py` and `workload.py` share them)."""
from __future__ import annotations

import re
import textwrap
from typing import Any

from engine.messages import Message, say, translate

WIDTH = 110  # where the prompt list and a long call wrap
KEY = 'os.environ.get("OPENAI_API_KEY", "EMPTY")'


def lit(text: str) -> str:
    """`text` as a double-quoted Python literal (the lab's quoting); eval gives `text` back."""
    r = repr(text)
    if r[0] == '"':
        return r
    return '"' + r[1:-1].replace("\\'", "'").replace('"', '\\"') + '"'


# The sampling parameters the openai SDK takes as arguments; the rest go in extra_body
SDK_SAMPLING = ("top_p", "frequency_penalty", "presence_penalty")


def shape_of(load) -> dict[str, Any]:
    """A stored load's request shape as LoadSpec fields (a header by its name: its value is never recorded)."""
    other = load.other
    headers = other.get("headers") or []
    names = [*(headers if isinstance(headers, list) else headers.keys()), *(other.get("credential_headers") or ())]
    return {"sampling": dict(other.get("sampling") or {}), "headers": {h: "" for h in names},
            "extra_body": dict(other.get("extra_body") or {}), "lora_modules": list(other.get("lora_modules") or []),
            "lora_weights": list(other.get("lora_weights") or []),
            "lora_assignment": other.get("lora_assignment") or "round-robin"}


def v1(base_url: str) -> str:
    """The OpenAI client's base URL: the server's with /v1 (once)."""
    return base_url.rstrip("/").removesuffix("/v1") + "/v1"


class Comments:
    """Comments in the viewer's language."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def line(self, m: Message, indent: str = "") -> str:
        return f"{indent}# {translate(m, self.lang)}"

    def inline(self, m: Message) -> str:
        return f"  # {translate(m, self.lang)}"


def client(cls: str, base_url: str, key_needed: bool, c: Comments) -> list[str]:
    why = (say("This server checks an API key: set OPENAI_API_KEY to it first (the key is never shown here).")
           if key_needed else
           say('vLLM started without --api-key accepts any key: "EMPTY" stands in for one.'))
    return [c.line(why), f"client = {cls}(base_url={lit(v1(base_url))}, api_key={KEY})"]


def comment(c: Comments, m: Message, indent: str = "") -> list[str]:
    """A comment in the viewer's language, wrapped at WIDTH."""
    return textwrap.wrap(c.line(m, indent), WIDTH, subsequent_indent=indent + "# ")


def paced_beyond_code(load: Any) -> bool:
    """Whether a run's arrivals are more than this code writes (constant gaps, a cap on requests in flight, a ramp
    by rate): its code is left unwritten rather than shown sending another load."""
    other = load.other if isinstance(load.other, dict) else {}
    return bool(other.get("arrival") == "constant" or other.get("max_in_flight") or other.get("ramp_strategy"))


def literal(v: Any) -> str:
    """A JSON value (an extra body's) as a Python literal, its text quoted as the lab quotes it."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{lit(str(k))}: {literal(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(literal(x) for x in v) + "]"
    return lit(v) if isinstance(v, str) else repr(v)


def headers_lines(names: list[str], c: "Comments") -> list[str]:
    """HEADERS, each value read from an environment variable named for its header (the run recorded names only)."""
    if not names:
        return []
    return [c.line(say("Each header's value from an environment variable: the run recorded their names only.")),
            "HEADERS = {" + ", ".join(f"{lit(h)}: os.environ[{lit(_variable(h))}]" for h in names) + "}"]


def _variable(header: str) -> str:
    """The environment variable a header's value is read from: X-Request-Source -> X_REQUEST_SOURCE."""
    return re.sub(r"[^A-Za-z0-9]", "_", header).upper()
