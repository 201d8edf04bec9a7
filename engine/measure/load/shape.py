"""A request's shape from text, as the CLI's --header/--extra-body and the Load test page's boxes give it: headers
as NAME:VALUE lines and an extra body as a JSON object, each refused in one sentence that never repeats a value (a
header's may be a key). The fields' own checks are LoadSpec's (spec.check_request_shape)."""
from __future__ import annotations

import json
from typing import Any

from engine.errors import ConfigError
from engine.messages import mark, say

MAX_BODY_CHARS = 100_000  # an extra body is a few fields, not a payload


def headers_of(lines: list[str], what: str = mark("A header")) -> dict[str, str]:
    """`NAME:VALUE` items (blank ones skipped) as headers; `what` names an item in a refusal ("--header")."""
    headers: dict[str, str] = {}
    for item in lines:
        if not item.strip():
            continue
        name, colon, value = item.partition(":")
        name = name.strip()
        if not colon or not name:
            raise ConfigError(say("{what} takes NAME:VALUE, e.g. X-Request-Source:lab, not '{item}'.", what=what,
                                  item=_shown(name or item)))
        if name.lower() in (h.lower() for h in headers):
            raise ConfigError(say("{what} {name} is given twice: give each header once.", what=what, name=name))
        headers[name] = value.strip()
    return headers


def extra_body_of(text: str, what: str = mark("The extra body")) -> dict[str, Any]:
    """A JSON object of fields to add to every request (blank: none); `what` names it in a refusal."""
    if not text.strip():
        return {}
    if len(text) > MAX_BODY_CHARS:
        raise ConfigError(say("{what} is {n:,} characters long: give a few fields, at most {limit:,} characters.",
                              what=what, n=len(text), limit=MAX_BODY_CHARS))
    try:
        body = json.loads(text)
    except ValueError as e:
        raise ConfigError(say("{what} is not JSON ({why}): give one object, e.g. '{{\"seed\": 0}}'.", what=what,
                              why=str(e).split(":")[0])) from None
    if not isinstance(body, dict):
        raise ConfigError(say("{what} must be a JSON object of fields to add, e.g. '{{\"seed\": 0}}', not {kind}.",
                              what=what, kind=type(body).__name__))
    return body


def _shown(text: str) -> str:
    """What a sentence repeats of a bad header: its first word only, so a value that is a secret is never printed."""
    return (text.split(":", 1)[0].split() or [""])[0][:60] + " …"


def request_fields(endpoint: str, temperature: float, sampling: dict[str, Any], headers: list[tuple[str, str]],
                   extra_body: str, lora_modules: str, lora_weights: str, lora_assignment: str) -> dict[str, Any]:
    """The LoadSpec fields of the Load test page's request boxes (a sampling parameter left empty is None and not
    sent; a header row with neither name nor value is skipped; modules and weights are space-separated), each bad
    one refused in one sentence; the spec checks their ranges when it is made."""
    rows = [f"{name}:{value}" for name, value in headers if name.strip() or value.strip()]
    modules = lora_modules.split()
    try:
        weights = [int(w) for w in lora_weights.split()]
    except ValueError:
        raise ConfigError(say("The LoRA weights are whole numbers separated by spaces, e.g. 3 1, not '{text}'.",
                              text=lora_weights[:40])) from None
    return {"endpoint": endpoint, "temperature": temperature,
            "sampling": {k: v for k, v in sampling.items() if v is not None},
            "headers": headers_of(rows), "extra_body": extra_body_of(extra_body), "lora_modules": modules,
            "lora_weights": weights, "lora_assignment": lora_assignment}


def shape_parts(load: Any):
    """What a recorded run's requests carried beyond the lab's plain chat request (its endpoint, sampling
    parameters, extra body, headers by name, LoRA modules and their shares), its parts joined by semicolons: the CLI's
    "request shape" line, and inside shape_said the pages' sentence; None for a plain request."""
    other = load.other if isinstance(getattr(load, "other", None), dict) else {}
    parts = [say("the {endpoint} endpoint", endpoint=load.endpoint)] if load.endpoint in ("completions", "embeddings",
                                                                                              "rerank") else []
    parts += [say("{name} {value}", name=k, value=f"{v:g}" if isinstance(v, float) else str(v))
              for k, v in (other.get("sampling") or {}).items()]
    if body := other.get("extra_body"):
        parts.append(say("extra body {json}", json=json.dumps(body, ensure_ascii=False)))
    headers = other.get("headers") or []
    if names := [*(headers if isinstance(headers, list) else headers), *(other.get("credential_headers") or ())]:
        parts.append(say("headers {names} (values not recorded)", names=", ".join(names)))
    if modules := other.get("lora_modules"):
        weights = other.get("lora_weights") or []
        named = ", ".join(f"{m} ×{w}" for m, w in zip(modules, weights)) if weights else ", ".join(modules)
        parts.append(say("LoRA {names} drawn at random", names=named) if other.get("lora_assignment") == "random"
                     else say("LoRA {names} in turn", names=named))
    if not parts:
        return None
    said = parts[0]
    for part in parts[1:]:  # each part a Message of its own: said again in the reader's language
        said = say("{said}; {part}", said=said, part=part)
    return said


def shape_said(load: Any):
    """shape_parts in one sentence, as the pages show it under a run; None for a plain request."""
    parts = shape_parts(load)
    return None if parts is None else say("Requests: {parts}.", parts=parts)
