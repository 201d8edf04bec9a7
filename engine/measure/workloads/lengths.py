"""Synthetic traffic of chosen lengths: input and output token lengths drawn, seeded, from a distribution.
See docs/measuring.md#workloads."""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from engine.measure.load.spec import MAX_TOKENS
from engine.measure.workloads.base import Plan, WorkloadError, length_summary
from engine.measure.workloads.tokens import Tokens, estimated
from engine.messages import Message, say

KINDS = ("fixed", "uniform", "normal", "chat-like")
PARAMETERS = {"fixed": ("mean",), "uniform": ("low", "high"), "normal": ("mean", "stdev", "low", "high"),
              "chat-like": ("low", "high")}  # the fields each kind reads
SHAPES_FILE = Path(__file__).with_name("shapes.json")


def shapes() -> dict:
    """The shipped shapes' parameters and sources (shapes.json)."""
    return json.loads(SHAPES_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution. fixed: `mean`; uniform: `low`..`high`; normal: `mean`, `stdev`, clipped to
    `low`..`high`; chat-like: the shipped lognormal of `side` ("input" | "output")."""

    kind: str = "fixed"
    mean: float = 128
    stdev: float = 0.0
    low: int = 1
    high: int = MAX_TOKENS
    side: str = "input"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise WorkloadError(say("The length distribution '{kind}' is unknown: pick one of {kinds}.", kind=self.kind,
                                    kinds=", ".join(KINDS)))
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                 for v in (self.mean, self.stdev, self.low, self.high))
        if not ok or self.stdev < 0 or not 1 <= self.low <= self.high <= MAX_TOKENS:
            raise WorkloadError(say("A length distribution needs 1 ≤ min ≤ max ≤ {limit:,} tokens and a stdev of 0 or "
                                    "more (min {low}, max {high}, stdev {stdev}).", limit=MAX_TOKENS, low=self.low,
                                    high=self.high, stdev=self.stdev))
        if self.kind in ("fixed", "normal") and not 1 <= self.mean <= MAX_TOKENS:
            raise WorkloadError(say("A length must be from 1 to {limit:,} tokens, not {v}.", limit=MAX_TOKENS,
                                    v=self.mean))

    def draw(self, n: int, rng: random.Random) -> list[int]:
        if self.kind == "fixed":
            return [round(self.mean)] * n
        if self.kind == "uniform":
            return [rng.randint(int(self.low), int(self.high)) for _ in range(n)]
        if self.kind == "normal":
            return [min(int(self.high), max(int(self.low), round(rng.gauss(self.mean, self.stdev)))) for _ in range(n)]
        p = shapes()["chat-like"][self.side]
        lo, hi = max(int(self.low), p["min"]), min(int(self.high), p["max"])
        return [min(hi, max(lo, round(rng.lognormvariate(math.log(p["median"]), p["sigma"])))) for _ in range(n)]

    def said(self) -> Message:
        if self.kind == "fixed":
            return say("{n:.0f} tokens", n=self.mean)
        if self.kind == "uniform":
            return say("{low}-{high} tokens, uniform", low=self.low, high=self.high)
        if self.kind == "normal":
            return say("normal, mean {mean:g}, stdev {stdev:g}, clipped to {low}-{high} tokens", mean=self.mean,
                       stdev=self.stdev, low=self.low, high=self.high)
        return say("chat-like long tail (shipped shape)")

    def as_dict(self) -> dict:
        """The parameters its kind has, and only those: a uniform range records no mean (its default 128 was
        recorded beside a 16-64 range whose requests averaged 41.65); what was drawn is the plan's to say."""
        return {"kind": self.kind, **{k: getattr(self, k) for k in PARAMETERS[self.kind]}}


def from_text(text: str, side: str = "input", what: str = "A length") -> Lengths:
    """The distribution one word names (the CLI's --input-len / --output-len): "200" fixed, "100-300" a uniform
    range, "200:50" a normal of that mean and stdev (clipped to 1 and 4 stdevs above the mean), "chat-like" the
    shipped shape; WorkloadError (one sentence naming `what`) otherwise."""
    word = str(text).strip().lower()
    try:
        if word == "chat-like":
            return chat_like(side)
        if ":" in word:
            mean, stdev = (float(x) for x in word.split(":"))
            return Lengths("normal", mean=mean, stdev=stdev, low=1,
                           high=max(1, min(MAX_TOKENS, math.ceil(mean + 4 * stdev))) if math.isfinite(mean + stdev)
                           else MAX_TOKENS, side=side)
        if "-" in word.lstrip("-"):
            low, high = (int(x) for x in word.split("-"))
            return Lengths("uniform", low=low, high=high, side=side)
        return Lengths("fixed", mean=int(word), side=side)
    except ValueError:
        raise WorkloadError(say("{what} '{text}' is not a length: give N tokens (200), a range (100-300), a mean and "
                                "stdev (200:50) or chat-like.", what=what, text=str(text)[:40])) from None


def chat_like(side: str) -> Lengths:
    return Lengths("chat-like", side=side)


def plan(n: int, inputs: Lengths, outputs: Lengths | None, seed: int = 0, tokens: Tokens | None = None,
         prefix_len: int = 0) -> Plan:
    """`n` synthetic requests whose prompts have input lengths drawn from `inputs` (exact with a tokenizer,
    estimated without) and whose answers are held to lengths from `outputs` (None: the spec's max_tokens). With
    `prefix_len`, every prompt starts with one shared prefix of that many tokens before its drawn length (vllm bench
    serve's --random-prefix-len: the prompt is the two together)."""
    if not isinstance(n, int) or not 1 <= n <= 100_000:
        raise WorkloadError(say("A synthetic workload sends from 1 to 100,000 requests, not {n}.", n=n))
    if not isinstance(prefix_len, int) or isinstance(prefix_len, bool) or not 0 <= prefix_len <= MAX_TOKENS:
        raise WorkloadError(say("The random prefix is a whole number of tokens from 0 to {limit:,}, not {v}.",
                                limit=MAX_TOKENS, v=prefix_len))
    tokens = tokens or estimated()
    rng = random.Random(seed)
    ins = inputs.draw(n, rng)
    outs = outputs.draw(n, rng) if outputs is not None else None
    if prefix_len:  # one head before every prompt, its tokens the same in each
        head = tokens.text_of(prefix_len, seed * 1_000_003 - 1)
        prompts = [tokens.after(head, k, seed * 1_000_003 + i) for i, k in enumerate(ins)]
    else:
        prompts = [tokens.text_of(k, seed * 1_000_003 + i) for i, k in enumerate(ins)]
    counted = [tokens.count(p) for p in prompts]
    summary = {"kind": "lengths", "name": str(inputs.said()), "sent": n, "seed": seed, "inputs": inputs.as_dict(),
               "outputs": outputs.as_dict() if outputs else None, "input_tokens": length_summary(counted),
               "output_tokens": length_summary(outs or []), "counted": str(tokens.said()), "tokenizer": tokens.source}
    if prefix_len:
        summary["prefix_len"] = prefix_len
    if "chat-like" in (inputs.kind, outputs.kind if outputs else ""):
        summary["shape_source"] = shapes()["chat-like"]["source"]
    return Plan("lengths", prompts, summary, max_tokens_each=outs, input_tokens=counted, output_tokens=outs or [])
