"""How the lab writes the Python behind a run: literals as the lab quotes them, the client aimed at a server, and
comments in the viewer's language (the snippets of `load.py` and `workload.py` share them)."""
from __future__ import annotations

import re
import textwrap
from typing import Any

from engine.measure.load.spec import RERANK_DOCUMENTS, LoadSpec
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


def comment(c: Comments, m: Message) -> list[str]:
    """A comment in the viewer's language, wrapped at WIDTH."""
    return textwrap.wrap(c.line(m), WIDTH, subsequent_indent="# ")


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


def tokens_used(spec: LoadSpec) -> str:
    """Where a request's tokens are read from: an answer's usage, an embedding's prompt tokens, a rerank's (a dict)
    total of its query's and documents'."""
    return {"embeddings": "r.usage.prompt_tokens", "rerank": 'r["usage"]["total_tokens"]'}.get(
        spec.endpoint, "r.usage.completion_tokens")


def request_call(spec: LoadSpec, prompt: str, indent: str, c: Comments, awaited: bool, tokens: str | None = None,
                 messages: str | None = None) -> list[str]:
    """`r = [await] client.….create(...)` for one prompt, wrapped as the lab writes it, with the request's shape: its
    endpoint, sampling parameters, headers (HEADERS) and extra body, and its LoRA module (`model`). `tokens`: the
    max_tokens expression (a workload's LENGTHS[i]; default the spec's); `messages`: a chat's whole messages
    expression (a conversation's history) instead of the one user prompt."""
    chat, embed = spec.endpoint == "chat", spec.endpoint == "embeddings"
    if spec.endpoint == "rerank":
        return _rerank_call(spec, prompt, indent, c, awaited)
    what = (f"messages={messages}" if chat and messages else
            'messages=[{"role": "user", "content": ' + prompt + "}]" if chat else f"input={prompt}" if embed
            else f"prompt={prompt}")
    args = ["model=model" if spec.lora_modules else "model=MODEL", what]
    tokens = tokens or (None if spec.max_tokens is None else str(spec.max_tokens))
    if tokens is not None and not embed:
        args.append(f"max_tokens={tokens}")
    if not embed:
        args.append(f"temperature={spec.temperature:g}")
    args += [f"{k}={v!r}" for k, v in spec.sampling.items() if k in SDK_SAMPLING]
    if spec.headers:
        args.append("extra_headers=HEADERS")
    extra = {**({"truncate_prompt_tokens": -1} if embed else {}),
             **{k: v for k, v in spec.sampling.items() if k not in SDK_SAMPLING}, **spec.extra_body}
    api = "chat.completions" if chat else "embeddings" if embed else "completions"
    lines = [f"{indent}r = {'await ' if awaited else ''}client.{api}.create("]
    tail = "," if spec.ignore_eos or extra else ")"
    args[-1] += tail
    line = indent + "    " + args[0]
    for arg in args[1:]:  # wrapped between arguments, never inside one
        if len(line) + 2 + len(arg) > WIDTH:
            lines.append(line + ",")
            line = indent + "    " + arg
        else:
            line += ", " + arg
    lines.append(line)
    if spec.ignore_eos:
        extra = {"ignore_eos": True, **extra}
    if extra:
        why = (say("vLLM's extension: always generate max_tokens") if spec.ignore_eos and len(extra) == 1 else
               say("what the OpenAI API has no argument for: vLLM reads it from the body"))
        lines.append(f"{indent}    extra_body={literal(extra)})" + c.inline(why))
    return lines


def _rerank_call(spec: LoadSpec, prompt: str, indent: str, c: Comments, awaited: bool) -> list[str]:
    """vLLM's /v1/rerank, which the openai SDK has no method for: its generic post, the JSON answer a dict."""
    model = "model" if spec.lora_modules else "MODEL"
    body = f'{{"model": {model}, "query": {prompt}, "documents": docs, "truncate_prompt_tokens": -1'
    body += "".join(f", {lit(str(k))}: {literal(v)}" for k, v in spec.extra_body.items()) + "}"
    options = ", options={\"headers\": HEADERS}" if spec.headers else ""
    return [c.line(say("vLLM's rerank: the prompt the query, the next prompts its documents, scored by the server"),
                   indent),
            f"{indent}r = {'await ' if awaited else ''}client.post(\"/rerank\", cast_to=object{options},",
            f"{indent}    body={body})"]


def shape_lines(spec: LoadSpec, c: Comments) -> list[str]:
    """HEADERS (each value from an environment variable named for it: a header's value is never recorded) and the
    LoRA modules' assignment (model_for), where the run sent them."""
    lines = []
    if spec.endpoint == "rerank":
        lines.append(f"docs_for = lambda i: [PROMPTS[(i + k) % len(PROMPTS)] for k in range(1, min({RERANK_DOCUMENTS}, "
                     "len(PROMPTS) - 1) + 1)] or PROMPTS[:1]")
    lines += headers_lines(list(spec.headers), c)
    if spec.lora_modules:
        weights = spec.lora_weights or [1] * len(spec.lora_modules)
        if spec.lora_assignment == "random":
            lines += [f"LORA, WEIGHTS, SEED = {literal(spec.lora_modules)}, {weights!r}, {spec.seed}",
                      "model_for = lambda i: random.Random(f\"{SEED}:{i}\").choices(LORA, WEIGHTS)[0]"
                      + c.inline(say("each request's LoRA module, drawn from the run's seed"))]
        else:
            cycle = [spec.model_for(i) for i in range(sum(weights))]
            lines += [f"MODELS = {literal(cycle)}"
                      + c.inline(say("each request names the next LoRA module in turn")),
                      "model_for = lambda i: MODELS[i % len(MODELS)]"]
    return lines
