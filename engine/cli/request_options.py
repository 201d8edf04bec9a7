"""`run`'s request-shape options, as `vllm bench serve` takes them: --endpoint, --header K:V, --extra-body JSON and
the sampling parameters. Parsed here; their ranges are LoadSpec's (measure/load/spec.py: check_request_shape), so
the CLI and any other caller refuse the same values with the same sentence."""
from __future__ import annotations

from typing import Any

from engine.measure.load.shape import extra_body_of, headers_of
from engine.measure.load.spec import ENDPOINTS, LORA_ASSIGNMENTS

# (option, LoadSpec.sampling's key, type)
_SAMPLING = (("--top-p", "top_p", float), ("--top-k", "top_k", int), ("--min-p", "min_p", float),
             ("--frequency-penalty", "frequency_penalty", float), ("--presence-penalty", "presence_penalty", float),
             ("--repetition-penalty", "repetition_penalty", float))


def add_request_options(r) -> None:
    g = r.add_argument_group("the request's shape (as vllm bench serve sends it)")
    g.add_argument("--endpoint", choices=tuple(ENDPOINTS),
                   help="chat: /v1/chat/completions (default), completions: /v1/completions with the prompt as text, "
                        "embeddings: /v1/embeddings (a pooling model's server; latency and prompt tokens only), "
                        "rerank: /v1/rerank as vllm bench serve's vllm-rerank (a cross-encoder's server; each prompt "
                        "the query, the next prompts its documents)")
    g.add_argument("--header", action="append", metavar="NAME:VALUE",
                   help="an HTTP header sent with every request (repeat for more); a credential's value "
                        "(Authorization, X-API-Key, ...) is sent but never recorded")
    g.add_argument("--extra-body", metavar="JSON",
                   help="a JSON object merged into every request's body, e.g. '{\"seed\": 0}' or "
                        "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'; recorded with the run")
    g.add_argument("--lora-modules", nargs="+", metavar="NAME",
                   help="LoRA adapters the server serves (its --lora-modules names): each request names one of them "
                        "instead of the model, as --lora-assignment shares them (a multi-turn chat keeps its first "
                        "turn's)")
    g.add_argument("--lora-assignment", choices=LORA_ASSIGNMENTS,
                   help="round-robin (default: each module in turn, so every run sends the same) or random (drawn "
                        "from the run's seed; vllm bench serve's default)")
    g.add_argument("--lora-weights", nargs="+", type=int, metavar="W",
                   help="each module's share of the requests, in --lora-modules' order, e.g. --lora-modules a b "
                        "--lora-weights 3 1 sends a three times as often as b (default: equal)")
    g.add_argument("--temperature", type=float, help="sampling temperature, 0 to 2 (default 0.7)")
    for option, _key, kind in _SAMPLING:
        g.add_argument(option, type=kind, help="sent as the request's " + option[2:].replace("-", "_"))


def asked(args) -> list[str]:
    """The request-shape options given, as their flags."""
    named = [f"--{o}" for o in ("endpoint", "header", "extra_body", "lora_modules", "lora_assignment", "lora_weights",
                                "temperature")
             if getattr(args, o) is not None]
    return [n.replace("_", "-") for n in named] + [o for o, key, _ in _SAMPLING if getattr(args, key) is not None]


def request_of(args) -> dict[str, Any]:
    """The LoadSpec fields the options set (none given: {}); ConfigError with one sentence for a header that is not
    NAME:VALUE, a header given twice, or an extra body that is not a JSON object (measure/load/shape.py)."""
    over: dict[str, Any] = {}
    if args.endpoint is not None:
        over["endpoint"] = args.endpoint
    if args.temperature is not None:
        over["temperature"] = args.temperature
    if args.lora_modules is not None:
        over["lora_modules"] = list(args.lora_modules)
    if args.lora_assignment is not None:
        over["lora_assignment"] = args.lora_assignment
    if args.lora_weights is not None:
        over["lora_weights"] = list(args.lora_weights)
    if sampling := {key: getattr(args, key) for _o, key, _t in _SAMPLING if getattr(args, key) is not None}:
        over["sampling"] = sampling
    if args.header:
        over["headers"] = headers_of(args.header, "--header")
    if args.extra_body is not None:
        over["extra_body"] = extra_body_of(args.extra_body, "--extra-body")
    return over

