"""`run`'s "what to send" options (--dataset, --input-len, --turns, --trace, --ramp-up, ...): the Load test page's
workload description, checked before any file is read or server started. See docs/internals.md#cli."""
from __future__ import annotations

import re
from dataclasses import replace

from engine.errors import ConfigError
from engine.measure.load.spec import MAX_TOKENS
from engine.measure.workloads.base import SEEDED
from engine.measure.workloads.seeds import SEED_LIMIT
from engine.messages import say

# The options in the order a sentence names them (argparse's dest)
OPTIONS = ("dataset", "hf_dataset", "trace", "turns", "fixed_text", "input_len", "prefix_len", "suffix_len",
           "num_prefixes", "random_prefix_len", "output_len", "time_scale", "time_unit", "num_prompts", "sample",
           "hf_split", "hf_subset", "hf_column", "ramp_up", "burstiness", "seed")
HUB_OPTIONS = ("hf_split", "hf_subset", "hf_column")  # which part of a Hugging Face dataset (hub.plan)
PREFIX_OPTIONS = ("prefix_len", "suffix_len", "num_prefixes")  # a shared-prefix workload's (prefixes.plan)
# Two options that cannot go together, and why (the first named is the one that says what to send)
_CONFLICTS = (
    ("dataset", "trace", say("both say what to send")),
    ("trace", "turns", say("a trace replays single requests, not conversations")),
    ("trace", "input_len", say("a trace gives each request's lengths itself")),
    ("trace", "output_len", say("a trace gives each request's lengths itself")),
    ("trace", "ramp_up", say("a trace brings its own clock")),
    ("trace", "burstiness", say("a trace brings its own clock")),
    ("dataset", "input_len", say("--input-len makes synthetic prompts, and the dataset brings its own")),
    ("turns", "input_len", say("--input-len makes synthetic prompts, and a multi-turn chat sends a file's turns")),
    ("turns", "output_len", say("a multi-turn chat's answers end naturally, up to --max-tokens")),
    *((a, b, say("a shared-prefix workload makes its own prompts")) for a in ("dataset", "trace", "turns")
      for b in (*PREFIX_OPTIONS, "random_prefix_len")),
    *(("input_len", b, say("--input-len draws each prompt's length, and a shared-prefix prompt is its prefix and "
                           "suffix")) for b in PREFIX_OPTIONS),
    *((a, "fixed_text", say("both say what to send")) for a in ("dataset", "trace", "turns")),
    *(("hf_dataset", b, say("both say what to send")) for b in ("dataset", "trace", "turns", "fixed_text", "input_len",
                                                                *PREFIX_OPTIONS, "random_prefix_len")),
    *(("fixed_text", b, say("a fixed text's prompts share the opening --prefix-len gives, one length each"))
      for b in ("suffix_len", "num_prefixes", "random_prefix_len")),
    *(("random_prefix_len", b, say("--random-prefix-len puts one prefix before random prompts, and --prefix-len "
                                   "makes several")) for b in PREFIX_OPTIONS),
)


def add_workload_options(r) -> None:
    g = r.add_argument_group("what to send (instead of the scenario's own prompts; the arrival stays the scenario's)")
    g.add_argument("--dataset", metavar="FILE",
                   help="your own prompts: JSONL, JSON or CSV with a prompt column (prompt, text, input or question), "
                        "ShareGPT conversations or OpenAI messages; an output_tokens column holds each answer to its "
                        "length. Checked as an upload is (64 MB, UTF-8, the first bad row named); the run records "
                        "its name, rows, sha256 and lengths, not the file")
    g.add_argument("--input-len", metavar="LEN",
                   help="synthetic prompts of this many tokens: N (exactly 200), LOW-HIGH (uniform, 100-300), "
                        "MEAN:STDEV (normal, 200:50, clipped to 1 and mean + 4 stdev) or chat-like (the shipped "
                        "long-tailed shape); made and counted with the embedded model's tokenizer, seeded")
    g.add_argument("--hf-dataset", metavar="NAME",
                   help="a Hugging Face dataset by name (owner/name, as datasets.load_dataset takes it) or a folder "
                        "written by save_to_disk: from this machine's Hugging Face cache when the Hub cannot be "
                        "reached (HF_DATASETS_OFFLINE=1), its rows read as --dataset's are; the run records its name, "
                        "split, rows and fingerprint")
    g.add_argument("--hf-split", metavar="SPLIT", help="the split of --hf-dataset to send (default train)")
    g.add_argument("--hf-subset", metavar="NAME", help="the subset (configuration) of --hf-dataset, where it has some")
    g.add_argument("--hf-column", metavar="COLUMN",
                   help="the column of --hf-dataset that holds the prompt, where it is not prompt, text, input or "
                        "question (nor ShareGPT conversations or OpenAI messages)")
    g.add_argument("--fixed-text", nargs="?", const=True, metavar="FILE",
                   help="prompts cut from a fixed text: FILE, a UTF-8 text file of your own, else the shipped one "
                        "(examples/workloads/fixed-text.txt, written for this project; vllm bench serve's sonnet "
                        "without its poems): --input-len N tokens each (default 256), the text's first --prefix-len "
                        "tokens shared by all (default 128), seeded lines after")
    g.add_argument("--random-prefix-len", type=int, metavar="N",
                   help="with --input-len: one shared prefix of N random tokens before every prompt, on top of its "
                        "drawn length (vllm bench serve's --random-prefix-len)")
    g.add_argument("--prefix-len", type=int, metavar="N",
                   help="shared prefixes (vllm bench serve's prefix_repetition, the workload that shows prefix "
                        "caching): each prompt is one of --num-prefixes prefixes of N tokens, then a suffix of its own "
                        "of --suffix-len tokens; the requests in a seeded random order (default 256)")
    g.add_argument("--suffix-len", type=int, metavar="N",
                   help="each shared-prefix request's own suffix, in tokens (default 256)")
    g.add_argument("--num-prefixes", type=int, metavar="K",
                   help="how many distinct shared prefixes, from 1 to --num-prompts (default 10)")
    g.add_argument("--output-len", metavar="LEN",
                   help="each answer held to this many tokens (max_tokens + ignore_eos), in --input-len's forms; "
                        "with --dataset one number N for the rows that give no length of their own; with "
                        "shared prefixes one number N (default 128)")
    g.add_argument("--turns", type=int, metavar="K",
                   help="multi-turn chats of K turns, each turn sent with the whole history so far (the user turns "
                        "from --dataset's conversations, else the shipped chat prompts)")
    g.add_argument("--trace", metavar="FILE",
                   help="replay a trace on its own clock: JSONL rows of timestamp (ms), input_length, output_length"
                        "[, hash_ids] (Mooncake) or Azure's CSV (TIMESTAMP, ContextTokens, GeneratedTokens)")
    g.add_argument("--time-scale", type=float, metavar="X",
                   help="the trace's gaps times X: 0.5 replays twice as fast, 2 half as fast (default 1)")
    g.add_argument("--time-unit", choices=("ms", "s"),
                   help="what the trace's numeric timestamps count: milliseconds (default, Mooncake's) or seconds")
    g.add_argument("--num-prompts", type=int, metavar="N",
                   help="how many: dataset rows (default all), synthetic prompts (default 32), shared-prefix requests "
                        "(default 100), trace rows (default all) or conversations with --turns (default 8)")
    g.add_argument("--sample", choices=("first", "random"),
                   help="which dataset rows --num-prompts takes: the first ones (default) or at random (seed 0)")
    g.add_argument("--ramp-up", type=float, metavar="SECONDS",
                   help="raise the requests in flight from 1 (a Poisson rate from a tenth of it) linearly to the "
                        "scenario's over this many seconds")
    g.add_argument("--seed", type=int, metavar="N",
                   help="the seed synthetic prompts are made from (--input-len, --prefix-len, random-512-64, "
                        "lengths-chat-like, prefix-repetition, sweep, slo-search, sustained, ramp-up, bursty); "
                        "default: a new one for every run and every repeat, so none finds another's prompts in the "
                        "server's prefix cache. Fixed, every repeat sends the same prompts; a sweep's or SLO search's "
                        "levels take the seed plus their index. Each run records its seed")
    g.add_argument("--burstiness", type=float, metavar="B",
                   help="gamma arrivals of shape B for a Poisson scenario, as vllm bench serve --burstiness: 1 is "
                        "Poisson, below 1 burstier, above 1 steadier")


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def kind_asked(scn, args) -> str | None:
    """The workload kind the options ask for: the file's or the lengths' flag first, else the scenario's own
    workload when an option changes it (--num-prompts on dataset-chat); None: the scenario as it is."""
    if args.trace is not None:
        return "trace"
    if args.turns is not None:
        return "multi-turn"
    if args.dataset is not None:
        return "dataset"
    if args.hf_dataset is not None:
        return "hub"
    text_asked = any(getattr(args, o) is not None for o in ("input_len", "prefix_len"))
    if args.fixed_text or (scn.workload.get("kind") == "fixed-text" and text_asked):
        return "fixed-text"
    if args.input_len is not None:
        return "lengths"
    if any(getattr(args, o) is not None for o in PREFIX_OPTIONS):
        return "prefix-repetition"
    own = scn.workload.get("kind")
    if own and any(getattr(args, o) is not None for o in ("output_len", "time_scale", "time_unit", "num_prompts",
                                                          "sample", "random_prefix_len")):
        return own
    return None


def check_workload_options(scn, args, how: dict[str, str]) -> None:
    """One sentence for a workload option out of place or two that conflict (ConfigError). `how`: what each
    arrival pattern does, in the words of run_options."""
    named = [o for o in OPTIONS if getattr(args, o) is not None]
    if not named:
        return
    if scn.kind == "naive":
        raise ConfigError(say("The naive scenario sends the lab's prompts through transformers itself: leave {flag} "
                              "out, or pick a load scenario (python -m engine list).", flag=_flag(named[0])))
    text = kind_asked(scn, args) == "fixed-text"  # its --input-len and --prefix-len go together
    for a, b, why in _CONFLICTS:
        if text and (a, b) == ("input_len", "prefix_len"):
            continue
        if getattr(args, a) is not None and getattr(args, b) is not None:
            raise ConfigError(say("{a} and {b} cannot go together: {why}. Give only one of them.", a=_flag(a),
                                  b=_flag(b), why=why))
    for o in (*PREFIX_OPTIONS, "random_prefix_len"):
        v, low = getattr(args, o), 0 if o == "random_prefix_len" else 1
        if v is not None and not low <= v <= MAX_TOKENS:
            raise ConfigError(say("{flag} is a whole number of tokens from {low} to {top:,}, not {v}.", flag=_flag(o),
                                  low=low, top=MAX_TOKENS, v=v))
    if args.num_prompts is not None and args.num_prompts < 1:
        raise ConfigError(say("--num-prompts is how many to send: give a whole number from 1 on, not {n}.",
                              n=args.num_prompts))
    kind = kind_asked(scn, args)
    if scn.kind == "sweep":  # at rates (--rates), its levels' arrivals may be gamma
        for o in ("turns", "trace", "ramp_up", *(("burstiness",) if args.rates is None else ())):
            if getattr(args, o) is not None:
                raise ConfigError(say("The sweep sets the requests in flight itself, level by level: leave {flag} "
                                      "out, or run a load scenario with it.", flag=_flag(o)))
    if args.time_scale is not None and kind != "trace":
        raise ConfigError(say("--time-scale scales a trace's clock: give --trace FILE with it, or run trace-tiny."))
    if args.time_unit is not None and kind != "trace":
        raise ConfigError(say("--time-unit says what a trace's timestamps count: give --trace FILE with it."))
    if args.sample is not None and kind not in ("dataset", "hub"):
        raise ConfigError(say("--sample picks the rows of a dataset: give --dataset FILE with it."))
    for o in HUB_OPTIONS:
        if getattr(args, o) is not None and kind != "hub":
            raise ConfigError(say("{flag} picks a part of a Hugging Face dataset: give --hf-dataset NAME with it.",
                                  flag=_flag(o)))
    if args.num_prompts is not None and kind is None:
        raise ConfigError(say("--num-prompts counts a workload's requests: give --dataset, --input-len, --prefix-len, "
                              "--turns or --trace with it."))
    if kind == "fixed-text" and args.input_len is not None and not re.fullmatch(r"\s*[1-9]\d*\s*", args.input_len):
        raise ConfigError(say("With --fixed-text, {flag} is one number of tokens, not '{v}'.", flag="--input-len",
                              v=args.input_len[:40]))
    if args.random_prefix_len is not None and kind != "lengths":
        raise ConfigError(say("--random-prefix-len puts a shared prefix before random prompts: give --input-len with "
                              "it, or run random-512-64 or lengths-chat-like."))
    if args.output_len is not None:
        if kind is None:
            raise ConfigError(say("--output-len holds a workload's answers to lengths: give --input-len or --dataset "
                                  "with it; for the scenario's own prompts, --max-tokens sets their length."))
        if kind in ("multi-turn", "trace"):
            raise ConfigError(say("The {name} scenario sends a {kind} workload, which --output-len does not apply to: "
                                  "leave it out.", name=scn.name, kind=kind))
        if kind in ("dataset", "hub") and not re.fullmatch(r"\s*\d+\s*", args.output_len):
            raise ConfigError(say("With --dataset, --output-len is one number of tokens for every answer, not "
                                  "'{v}'.", v=args.output_len[:40]))
        if kind == "fixed-text" and not re.fullmatch(r"\s*[1-9]\d*\s*", args.output_len):
            raise ConfigError(say("With --fixed-text, {flag} is one number of tokens, not '{v}'.", flag="--output-len",
                                  v=args.output_len[:40]))
        if kind == "prefix-repetition" and not re.fullmatch(r"\s*[1-9]\d*\s*", args.output_len):
            raise ConfigError(say("With shared prefixes, --output-len is one number of tokens for every answer, not "
                                  "'{v}'.", v=args.output_len[:40]))
    if args.seed is not None:
        if (kind or scn.workload.get("kind")) not in SEEDED and not (kind is None and scn.seeded):
            from engine.measure.workloads.scenarios import SCENARIOS

            made = [s.name for s in SCENARIOS.values() if s.seeded or s.workload.get("kind") in SEEDED]
            raise ConfigError(say("--seed makes synthetic prompts from that seed, and the {name} scenario sends "
                                  "prompts of its own: give --input-len or --prefix-len with it, or run one of "
                                  "{names}.", name=scn.name, names=", ".join(made)))
        if not 0 <= args.seed < SEED_LIMIT:
            raise ConfigError(say("--seed must be a whole number from 0 to {top:,}, not {v}.", top=SEED_LIMIT - 1,
                                  v=args.seed))
    from engine.cli.rate_options import at_rate, by_rate_levels

    shape = "trace" if kind == "trace" else "poisson" if at_rate(args) or by_rate_levels(scn, args) else scn.shape
    if args.burstiness is not None and shape != "poisson":
        raise ConfigError(say("--burstiness shapes Poisson arrivals, and the {name} scenario {how}: run sustained or "
                              "bursty with it.", name=scn.name, how=how.get(shape, shape)))
    if args.ramp_up is not None and shape not in ("concurrency", "poisson"):
        raise ConfigError(say("--ramp-up raises the requests in flight or a Poisson rate, and the {name} scenario "
                              "{how}: run one that keeps requests in flight (dataset-chat, ramp-up) or arrives at a "
                              "rate (sustained).", name=scn.name, how=how.get(shape, shape)))


def workload_of(scn, args):
    """(the scenario sending what the options ask, an uploaded file's bytes or None, the LoadSpec fields they
    set): the options' workload description replaces the scenario's (what it keeps of its own: the settings a
    new file does not change, such as a multi-turn chat's turns). WorkloadError for a file that cannot be read."""
    from engine.measure.workloads.base import read_file
    from engine.measure.workloads.lengths import from_text

    from engine.measure.workloads import seeds

    over = {k: v for k, v in (("ramp_up_s", args.ramp_up), ("burstiness", args.burstiness)) if v is not None}
    kind = kind_asked(scn, args)
    if kind is None:
        if scn.workload.get("kind") in SEEDED:  # synthetic prompts: the seed given, else a new one
            scn = replace(scn, workload={**scn.workload, "seed": seeds.fresh() if args.seed is None else args.seed})
        return scn, None, over
    path = (args.trace if kind == "trace" else args.fixed_text if kind == "fixed-text" and
            isinstance(args.fixed_text, str) else args.dataset if kind != "fixed-text" else None)
    data, name = read_file(path, text=kind == "fixed-text") if path is not None else (None, None)
    desc = dict(scn.workload) if scn.workload.get("kind") == kind else {"kind": kind}
    if name is not None:  # a file of one's own: the scenario's sampling of its shipped file does not carry over
        desc = {"kind": kind, "file": name, **({k: v for k, v in desc.items() if k in ("conversations", "turns",
                                                                                    "think_time_s")})}
    n = args.num_prompts
    if kind == "dataset":
        desc.update({k: v for k, v in (("n", n), ("how", args.sample)) if v is not None})
        if args.output_len is not None:
            desc["max_tokens"] = int(args.output_len)
    elif kind == "lengths":
        desc["n"] = n or desc.get("n") or scn.num_requests or 32
        desc["seed"] = seeds.fresh() if args.seed is None else args.seed
        if args.input_len is not None:
            desc["input"] = from_text(args.input_len, "input", "--input-len").as_dict()
        if args.output_len is not None:
            desc["output"] = from_text(args.output_len, "output", "--output-len").as_dict()
        if args.random_prefix_len is not None:
            desc["prefix_len"] = args.random_prefix_len
    elif kind == "prefix-repetition":
        desc["n"] = n or desc.get("n") or 100
        desc["seed"] = seeds.fresh() if args.seed is None else args.seed
        desc.update({k: getattr(args, k) for k in PREFIX_OPTIONS if getattr(args, k) is not None})
        if args.output_len is not None:
            desc["output_len"] = int(args.output_len)
    elif kind == "hub":
        desc = {"kind": "hub", "dataset": args.hf_dataset, "split": args.hf_split or "train", "subset": args.hf_subset,
                "column": args.hf_column, "seed": 0}
        desc.update({k: v for k, v in (("n", n), ("how", args.sample)) if v is not None})
        if args.output_len is not None:
            desc["max_tokens"] = int(args.output_len)
    elif kind == "fixed-text":
        desc["n"] = n or desc.get("n") or 24
        desc["seed"] = seeds.fresh() if args.seed is None else args.seed
        desc.update({o: int(getattr(args, o)) for o in ("input_len", "prefix_len") if getattr(args, o) is not None})
        if args.prefix_len is None and desc.get("prefix_len", 128) >= desc.get("input_len", 256):
            desc["prefix_len"] = desc["input_len"] // 2  # a shorter prompt than the default opening: half shared
        if args.output_len is not None:
            desc["output_len"] = int(args.output_len)
    elif kind == "multi-turn":
        desc["conversations"] = n or desc.get("conversations", 8)
        desc["turns"] = args.turns if args.turns is not None else desc.get("turns", 3)
    else:
        desc.update({k: v for k, v in (("n", n), ("time_scale", args.time_scale), ("time_unit", args.time_unit))
                     if v is not None})
    return replace(scn, workload=desc), data, over
