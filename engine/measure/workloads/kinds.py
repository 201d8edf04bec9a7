"""Every workload kind behind one call (`plan_of`): a scenario's small dict, with an uploaded file, into a `Plan`.
See docs/measuring.md#workloads."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.measure.workloads import conversations, datasets, fixed_text, hub, lengths, prefixes, traces
from engine.measure.workloads import base
from engine.measure.workloads.base import Plan, Report, WorkloadError
from engine.measure.workloads.tokens import Tokens, estimated
from engine.messages import say

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "workloads"
KINDS = ("dataset", "hub", "lengths", "prefix-repetition", "fixed-text", "multi-turn", "trace")
SEEDED = base.SEEDED  # kinds whose prompts a seed makes: another seed, other prompts alike


def example(name: str) -> bytes:
    """A shipped example file's bytes (only a bare name in examples/workloads/: never a path)."""
    path = EXAMPLES / name
    if Path(name).name != name or not path.is_file():
        shipped = ", ".join(sorted(p.name for p in EXAMPLES.glob("*") if p.suffix in (".jsonl", ".json", ".csv")))
        raise WorkloadError(say("There is no example workload '{name}': pick one of {names}.", name=name,
                                names=shipped))
    return path.read_bytes()


def plan_of(desc: dict[str, Any], tokens: Tokens | None = None, data: bytes | None = None,
            report: Report | None = None) -> Plan:
    """The Plan a workload description makes. `data`: an uploaded file's content (its name in desc["file"]),
    else desc["file"] is a shipped example. Keys by kind:
    dataset: file, n, how ("first" | "random"), seed, output_from_reply, max_tokens;
    hub: dataset (a Hugging Face dataset's name, or a folder saved with save_to_disk), subset, split, column, n,
      how, seed, max_tokens, output_from_reply (as dataset's);
    lengths: n, input and output (Lengths fields: kind, mean, stdev, low, high), seed, prefix_len (one shared
      prefix of that many tokens before every prompt);
    prefix-repetition: n, prefix_len, suffix_len, num_prefixes, output_len, seed;
    fixed-text: file (a text file; none: the shipped text), n, input_len, prefix_len (the text's opening every
      prompt shares), output_len, seed;
    multi-turn: file (a dataset; none: the shipped chat prompts), conversations, turns, think_time_s, seed;
    trace: file, time_scale, time_unit, n.
    `report` hears how far a large file's rows are read and its prompts counted."""
    tokens = tokens or estimated()
    kind = desc.get("kind")
    if kind not in KINDS:
        raise WorkloadError(say("The workload kind '{kind}' is unknown: pick one of {kinds}.", kind=kind,
                                kinds=", ".join(KINDS)))

    def content(default: str | None = None) -> tuple[bytes, str]:
        name = desc.get("file") or default
        if name is None:
            raise WorkloadError(say("The {kind} workload needs a file.", kind=kind))
        return (data, name) if data is not None else (example(name), name)

    if kind == "dataset":
        ds = datasets.parse(*content(), report=report)
        return datasets.plan(ds, desc.get("n"), desc.get("how", "first"), desc.get("seed", 0), tokens,
                             desc.get("output_from_reply", False), desc.get("max_tokens"), report=report)
    if kind == "hub":
        return hub.plan(desc.get("dataset", ""), desc.get("subset"), desc.get("split", "train"), desc.get("column"),
                        desc.get("n"), desc.get("how", "first"), desc.get("seed", 0), tokens, desc.get("max_tokens"),
                        desc.get("output_from_reply", False), report=report)
    if kind == "lengths":
        out = desc.get("output")
        return lengths.plan(desc.get("n", 32), lengths.Lengths(**desc.get("input", {})),
                            lengths.Lengths(**{"side": "output", **out}) if out is not None else None,
                            desc.get("seed", 0), tokens, desc.get("prefix_len", 0))
    if kind == "prefix-repetition":
        return prefixes.plan(desc.get("n", 100), **{k: desc.get(k, v) for k, v in prefixes.DEFAULTS.items()},
                             seed=desc.get("seed", 0), tokens=tokens)
    if kind == "fixed-text":
        name = desc.get("file") or fixed_text.SHIPPED
        text = (data if data is not None else example(name) if name == fixed_text.SHIPPED else
                fixed_text.kept(desc.get("sha256", ""), name))  # the user's own text, made again from another seed
        return fixed_text.plan(text, name, desc.get("n", 24),
                               **{k: desc.get(k, v) for k, v in fixed_text.DEFAULTS.items()}, seed=desc.get("seed", 0),
                               tokens=tokens)
    if kind == "multi-turn":
        ds = datasets.parse(*content("chat-prompts.jsonl"), report=report)
        return conversations.plan(desc.get("conversations", 4), desc.get("turns", 3), ds, desc.get("seed", 0),
                                  tokens, desc.get("think_time_s", 0.0))
    tr = traces.parse(*content(), time_unit=desc.get("time_unit", "ms"), report=report)
    return traces.plan(tr, desc.get("time_scale", 1.0), tokens, desc.get("n"), report=report)


def described(summary: dict) -> dict:
    """The description (plan_of's keys) that made a seeded kind's recorded summary, to make it again from another
    seed (seeds.reseed)."""
    if summary.get("kind") == "lengths":
        outs = summary.get("outputs")
        return {"kind": "lengths", "n": int(summary["sent"]), "input": summary["inputs"],
                "output": outs if outs else None, "prefix_len": summary.get("prefix_len", 0)}
    if summary.get("kind") == "fixed-text":
        return {"kind": "fixed-text", "n": int(summary["sent"]), "file": summary.get("file"),
                "sha256": summary.get("sha256"), **{k: summary[k] for k in fixed_text.DEFAULTS}}
    return {"kind": summary["kind"], "n": int(summary["sent"]), **{k: summary[k] for k in prefixes.DEFAULTS}}
