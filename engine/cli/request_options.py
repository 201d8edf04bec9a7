"""`run`'s request-shape options, as `vllm bench serve` takes them: --endpoint, --header K:V, --extra-body JSON and
the sampling parameters. Parsed here; their ranges are LoadSpec's (measure/load/spec.py: check_request_shape), so
the CLI and any other caller refuse the same values with the same sentence."""
from __future__ import annotations

import json
from typing import Any

from engine.errors import ConfigError
from engine.messages import say

# (option, LoadSpec.sampling's key, type)
_SAMPLING = (("--top-p", "top_p", float), ("--top-k", "top_k", int), ("--min-p", "min_p", float),
             ("--frequency-penalty", "frequency_penalty", float), ("--presence-penalty", "presence_penalty", float),
             ("--repetition-penalty", "repetition_penalty", float))


def add_request_options(r) -> None:
    g = r.add_argument_group("the request's shape (as vllm bench serve sends it)")
    g.add_argument("--endpoint", choices=("chat", "completions", "embeddings"),
                   help="chat: /v1/chat/completions (default), completions: /v1/completions with the prompt as text, "
                        "embeddings: /v1/embeddings (a pooling model's server; latency and prompt tokens only)")
    g.add_argument("--header", action="append", metavar="NAME:VALUE",
                   help="an HTTP header sent with every request (repeat for more); a credential's value "
                        "(Authorization, X-API-Key, ...) is sent but never recorded")
    g.add_argument("--extra-body", metavar="JSON",
                   help="a JSON object merged into every request's body, e.g. '{\"seed\": 0}' or "
                        "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'; recorded with the run")
    g.add_argument("--lora-modules", nargs="+", metavar="NAME",
                   help="LoRA adapters the server serves (its --lora-modules names): each request names the next in "
                        "turn instead of the model, round-robin (a multi-turn chat keeps its first turn's)")
    g.add_argument("--temperature", type=float, help="sampling temperature, 0 to 2 (default 0.7)")
    for option, _key, kind in _SAMPLING:
        g.add_argument(option, type=kind, help="sent as the request's " + option[2:].replace("-", "_"))


def asked(args) -> list[str]:
    """The request-shape options given, as their flags."""
    named = [f"--{o}" for o in ("endpoint", "header", "extra_body", "lora_modules", "temperature")
             if getattr(args, o) is not None]
    return [n.replace("_", "-") for n in named] + [o for o, key, _ in _SAMPLING if getattr(args, key) is not None]


def request_of(args) -> dict[str, Any]:
    """The LoadSpec fields the options set (none given: {}); ConfigError with one sentence for a header that is not
    NAME:VALUE, a header given twice, or an extra body that is not a JSON object."""
    over: dict[str, Any] = {}
    if args.endpoint is not None:
        over["endpoint"] = args.endpoint
    if args.temperature is not None:
        over["temperature"] = args.temperature
    if args.lora_modules is not None:
        over["lora_modules"] = list(args.lora_modules)
    if sampling := {key: getattr(args, key) for _o, key, _t in _SAMPLING if getattr(args, key) is not None}:
        over["sampling"] = sampling
    if args.header:
        headers: dict[str, str] = {}
        for item in args.header:
            name, colon, value = item.partition(":")
            name = name.strip()
            if not colon or not name:
                raise ConfigError(say("--header takes NAME:VALUE, e.g. --header X-Request-Source:lab, not '{item}'.",
                                      item=_shown(name or item)))
            if name.lower() in (h.lower() for h in headers):
                raise ConfigError(say("--header {name} is given twice: give each header once.", name=name))
            headers[name] = value.strip()
        over["headers"] = headers
    if args.extra_body is not None:
        try:
            body = json.loads(args.extra_body)
        except ValueError as e:
            raise ConfigError(say("--extra-body is not JSON ({why}): give one object, e.g. '{{\"seed\": 0}}'.",
                                  why=str(e).split(":")[0])) from None
        if not isinstance(body, dict):
            raise ConfigError(say("--extra-body must be a JSON object of fields to add, e.g. '{{\"seed\": 0}}', not "
                                  "{kind}.", kind=type(body).__name__))
        over["extra_body"] = body
    return over


def _shown(text: str) -> str:
    """What a sentence repeats of a bad header: its first word only, so a value that is a secret is never printed."""
    return (text.split(":", 1)[0].split() or [""])[0][:60] + " …"
