"""What a run records of its workload, in a few words: History's column, the pair's and Tuning's "sent the same
workload" sentence, the Python behind a run's first comment."""
from __future__ import annotations

import json

from engine.errors import LabError
from engine.measure.workloads import fixed_text, prefixes
from engine.measure.workloads.base import SEEDED
from engine.measure.workloads.lengths import Lengths
from engine.messages import Message, say


def named(workload: dict | None) -> Message | str:
    """A recorded workload's kind and name in a few words (History's column; "" for a run without one): the
    lengths' description said again, so it reads in the viewer's language."""
    if not workload:
        return ""
    kind, name = str(workload.get("kind") or ""), workload.get("name") or ""
    if kind == "lengths" and isinstance(workload.get("inputs"), dict):
        try:
            name = Lengths(**workload["inputs"]).said()
        except (LabError, TypeError):  # an older or imported record: its stored words
            pass
    if kind == "prefix-repetition" and all(k in workload for k in ("prefix_len", "suffix_len", "num_prefixes")):
        name = prefixes.said(workload["prefix_len"], workload["suffix_len"], workload["num_prefixes"])
    if kind == "fixed-text" and all(k in workload for k in ("input_len", "prefix_len")):
        name = fixed_text.said(workload["input_len"], workload["prefix_len"])
    if kind == "lengths" and name and workload.get("prefix_len"):
        name = say("{lengths} after a shared prefix of {n} tokens", lengths=name, n=workload["prefix_len"])
    kinds: dict[str, Message | str] = {"dataset": say("dataset"), "lengths": say("lengths"),
                                       "multi-turn": say("multi-turn"), "trace": say("trace"),
                                       "prefix-repetition": say("shared prefixes"), "fixed-text": say("fixed text"),
                                       "hub": say("Hugging Face dataset")}
    if kind in SEEDED and name and workload.get("seed") is not None:  # which draw: the prompts made again from it
        return say("{kind} · {name} · seed {seed}", kind=kinds[kind], name=name, seed=workload["seed"])
    return say("{kind} · {name}", kind=kinds.get(kind, kind), name=name) if name else kinds.get(kind, kind)


def run_workload(run) -> Message | str:
    """What a saved run (RunResult) was sent, in a few words: its recorded workload (named), else how many
    requests it drew from how many prompts of its own (the lab's, seeded or a scenario's)."""
    if w := named(run.load.workload):
        return w
    if not run.load.prompts:  # an imported or older record that kept no prompts
        return say("{n} requests", n=len(run.measured))
    if (seed := run.load.other.get("prompt_seed")) is not None:
        return say("{n} requests drawn from {k} synthetic prompts of seed {seed}", n=len(run.measured),
                   k=len(run.load.prompts), seed=seed)
    return say("{n} requests drawn from {k} prompts", n=len(run.measured), k=len(run.load.prompts))


def one_workload(runs) -> bool:
    """Whether the runs were all sent the same workload: the same recorded summary (kind, file, rows, hash,
    lengths) and the same prompts, as the runs of one comparison or pair are."""
    return len({json.dumps([r.load.workload, r.load.prompts], sort_keys=True, default=str) for r in runs}) <= 1
