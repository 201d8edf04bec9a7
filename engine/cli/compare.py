"""`compare A B`: two saved runs, or two sets of repeats, judged on throughput, TTFT, TPOT and E2E latency by
engine.measure.judge.verdict, one sentence per metric (beyond the measured noise or not), as History says them.
A side is a run id, a repeat group's id, or a label; ids joined by commas make one set."""
from __future__ import annotations

import json

from engine.cli.output import say_line
from engine.errors import ConfigError
from engine.messages import say

# What a comparison is judged on, in the order it is said: the whole job's throughput, then a typical request's
# first token, decode step and whole answer (vllm bench serve's headline numbers)
KEYS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")


def register(sub) -> None:
    c = sub.add_parser("compare", help="compare two saved runs or two sets of repeats, beyond noise or not")
    c.add_argument("a", metavar="A", help="a run id (or its first 6+ characters), a repeat group's id, or a run's "
                                          "label (its newest set of repeats); ids joined by commas make one set")
    c.add_argument("b", metavar="B", help="the same for the other side: B is said against A")
    c.add_argument("--json", action="store_true", help="print the verdicts as JSON instead of sentences")
    c.set_defaults(func=_compare)


def resolve(store, ref: str) -> list:
    """The runs `ref` names (each with its requests): a run id or an unambiguous prefix of one (6 characters at
    least), a repeat group's id, a label (its newest set: a repeat group, or one run), or such names joined by
    commas. ConfigError with one sentence for a name that matches nothing or more than one run."""
    from engine.measure.judge import repeats

    names = [n.strip() for n in ref.split(",") if n.strip()]
    if not names:
        raise ConfigError(say("Name the runs to compare: a run id, a repeat group's id or a label, not '{ref}'.",
                              ref=ref))
    rows = store.list()
    ids: list[str] = []
    for name in names:
        found = _ids_of(rows, name, repeats.sets)
        ids += [i for i in found if i not in ids]
    return [store.load(i) for i in ids]


def _ids_of(rows, name: str, sets) -> list[str]:
    if any(r.id == name for r in rows):
        return [name]
    group = [r for r in rows if r.extra.repeat.group == name]
    if group:
        return [r.id for r in sorted(group, key=lambda r: r.extra.repeat.index or 0)]
    labelled = [r for r in rows if r.label == name]
    if labelled:  # newest first: the newest set of that label
        newest = sets(labelled)[0]
        return [r.id for r in sorted(newest, key=lambda r: r.extra.repeat.index or 0)]
    prefixed = [r for r in rows if len(name) >= 6 and r.id.startswith(name)]
    if len(prefixed) == 1:
        return [prefixed[0].id]
    if len(prefixed) > 1:
        raise ConfigError(say("'{name}' starts {n} run ids: give more of the one you mean (python -m engine export "
                              "lists them).", name=name, n=len(prefixed)))
    raise ConfigError(say("No run, repeat group or label '{name}' in the history: check the id (python -m engine "
                          "export prints every run's) or the label as History shows it.", name=name))


def verdicts(runs_a: list, runs_b: list, label_a: str, label_b: str) -> list:
    """B against A on each of KEYS that both sides measured (engine.measure.judge.verdict.compare_runs)."""
    from engine.measure.judge import verdict
    from engine.metrics import metric_info

    out = []
    for key in KEYS:
        info = metric_info(key)
        if (v := verdict.compare_runs(runs_a, runs_b, key, name=info.label, label_a=label_a, label_b=label_b,
                                      unit=info.unit)) is not None:
            out.append((key, v))
    return out


def side_label(runs: list, other: list) -> str:
    """How a sentence names a side: its label, with the first run's start time (or id) where both sides share
    one label."""
    from engine.measure.judge import verdict

    a, b = runs[0], other[0]
    return verdict.labels_apart(a, b, a.label or a.id, b.label or b.id)[0]


def _compare(args) -> int:
    from engine.observe import disturbance
    from engine.results.store import RunStore

    store = RunStore(args.settings.db)
    runs_a, runs_b = resolve(store, args.a), resolve(store, args.b)
    if {r.id for r in runs_a} & {r.id for r in runs_b}:
        raise ConfigError(say("A and B share a run, so they cannot be told apart: name two different runs or sets."))
    label_a, label_b = side_label(runs_a, runs_b), side_label(runs_b, runs_a)
    found = verdicts(runs_a, runs_b, label_a, label_b)
    busy = {side: said for side, runs in (("A", runs_a), ("B", runs_b))
            if (said := disturbance.said_of(runs)) is not None}
    if args.json:
        print(json.dumps(_as_json(runs_a, runs_b, label_a, label_b, found, busy), ensure_ascii=False, indent=1))
        return 0
    for side, runs, label in (("A", runs_a, label_a), ("B", runs_b, label_b)):
        say_line(say("{side}: {label}, {runs}", side=side, label=label, runs=", ".join(r.id for r in runs)))
    if not found:
        say_line(say("These runs share no measured number to compare (no throughput or latency on both sides)."))
    for _key, v in found:
        say_line(v.said)  # beside a disturbed run: no verdict, and what disturbed which side
    return 0


def _as_json(runs_a, runs_b, label_a, label_b, found, busy) -> dict:
    """The verdicts as data: each metric's centres, ratio and interval, whether beyond noise, how many a side."""
    def side(runs, label, name):
        return {"label": str(label), "runs": [r.id for r in runs], "disturbed": name in busy,
                "disturbance": str(busy[name]) if name in busy else None}

    return {"a": side(runs_a, label_a, "A"), "b": side(runs_b, label_b, "B"), "metrics": [
        {"key": key, "name": str(v.name), "unit": str(v.unit), "per": v.per, "n_a": v.n_a, "n_b": v.n_b,
         "center_a": v.center_a, "center_b": v.center_b, "ratio": v.ratio, "low": v.low, "high": v.high,
         "diff": v.diff, "diff_low": v.diff_low, "diff_high": v.diff_high, "p": v.p, "level": v.level,
         "method": str(v.method), "between_runs": v.allowance, "beyond_noise": v.beyond_noise, "finding": v.finding,
         "disturbed": str(v.disturbed) if v.disturbed is not None else None, "said": str(v.said)} for key, v in found]}
