"""What the Load test page offers first and the workloads it builds, following the server it measures
(its device, its max-model-len, what a server at a URL says about itself), passed in by the caller."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import kinds, prompts, scenarios, seeds
from engine.measure.workloads import tokens as toks
from engine.measure.workloads.base import MAX_FILE_BYTES, Plan
from engine.messages import say

FULL_LEVELS = (1, 4, 16, 64, 128, 256)  # a GPU's sweep: up to where its batch fills
NEUTRAL_LEVELS = (1, 4, 16, 64)  # a server that does not say what it holds


@dataclass(frozen=True)
class LoadDefaults:
    """What the Load test page offers first, following the server it measures."""

    in_flight_max: int  # the end of the "requests in flight" slider
    sweep_levels: tuple[int, ...]  # the sweep's levels, selected at first
    sweep_max_tokens: int  # tokens a sweep request asks for
    said: str = ""  # why these, for a server at a URL (a Message)


def load_defaults(device: str, max_len: int | None, attached=None) -> LoadDefaults:
    """For our own server (`attached` None), what this machine's `device` runs in reasonable time; for a
    server at a URL (engine.lab.Attached: its url and KV capacity), what it said about itself, since this
    machine's cores or GPUs say nothing about it. `max_len`: the ready server's max-model-len, if known."""
    limit = max_len or 128
    if attached is None:
        cpu = device == "cpu"
        return LoadDefaults(64 if cpu else 256, (1, 2, 4, 8, 16) if cpu else FULL_LEVELS,
                            min(64 if cpu else 128, limit))
    tokens = min(128, limit)
    capacity = attached.kv_capacity_tokens  # its /metrics' cache_config_info, read when it was discovered
    if not capacity:
        return LoadDefaults(256, NEUTRAL_LEVELS, tokens, say(
            "{url} does not say how big its KV cache is (no vLLM /metrics): the sweep offers {levels} requests in "
            "flight; add levels to go further.", url=attached.url, levels=", ".join(map(str, NEUTRAL_LEVELS))))
    per_request = tokens + scenarios.get("sweep").prompt_tokens_guess
    fits = max(1, int(capacity // per_request))
    # every level that fits in its KV cache at once, and the next one up: where requests start to wait
    levels = tuple(n for i, n in enumerate(FULL_LEVELS) if i == 0 or FULL_LEVELS[i - 1] <= fits)
    return LoadDefaults(256, levels, tokens, say(
        "The sweep's levels follow the KV cache of {url}: its {capacity:,} tokens hold about {fits:,} of the "
        "sweep's requests ({per} tokens each) at once, so the sweep goes to {top} in flight.",
        url=attached.url, capacity=int(capacity), fits=fits, per=per_request, top=levels[-1]))


def sweep_spec(defaults: LoadDefaults, plan: Plan | None = None, seed: int | None = None,
               request: dict[str, Any] | None = None, models_dir: Path | None = None) -> LoadSpec:
    """The sweep's workload, its tokens per request as `defaults` (load_defaults) follow the server. A workload
    `plan` (workload_plan: a dataset or lengths; each level cycles its requests) replaces the sweep's prompts,
    and every level's run records it; a trace's clock or a chat's turns are refused by the sweep
    (runs.check_sweep), which sets the requests in flight itself. Synthetic prompts (the sweep's own, a length
    distribution's) are made from `seed`, a new one when None: a second sweep never meets the first's prompts in
    the prefix cache (each level then adds its index: seeds.nth). `request`: the request's shape, as
    load_test_spec's (with_request). `models_dir`: where the embedded model's tokenizer is (seeds.reseed)."""
    spec = scenarios.get("sweep").load_spec(max_tokens=defaults.sweep_max_tokens, seed=seed, models_dir=models_dir)
    return with_request(spec if plan is None else seeds.reseed(plan.apply(spec), int(spec.prompt_seed or 0),
                                                               models_dir=models_dir), request)


def with_request(spec: LoadSpec, request: dict[str, Any] | None) -> LoadSpec:
    """`spec` sending the request shape the Load test page's boxes chose (measure.load.shape's request_fields: the
    endpoint, sampling, headers, extra body, LoRA modules), for every kind of run the page starts: one shape for the
    load test, the sweep, the SLO search and the pair. LoadSpec's one sentence (ConfigError) for a bad one."""
    return replace(spec, **request) if request else spec


# What the Load test page offers to send: the lab's prompts first, then each workload kind
WHAT = ("lab", "synthetic", *kinds.KINDS)
SEEDED = kinds.SEEDED  # the kinds whose prompts the page's seed field makes (with its seeded synthetic prompts)
# The shipped files (examples/workloads/) each kind can read; an upload replaces them
EXAMPLES = {"dataset": ("chat-prompts.jsonl", "conversations.json"),
            "multi-turn": ("conversations.json", "chat-prompts.jsonl"), "trace": ("tiny-trace.jsonl",)}
UPLOAD_BYTES = MAX_FILE_BYTES  # the engine's own cap: the uploader refuses bigger files before reading them


_PLANS: dict[str, Plan] = {}  # the latest plans made, by description and file, oldest first
PLANS_KEPT = 16


def workload_plan(desc: dict, data: bytes | None = None, report=None, models_dir: Path | None = None) -> Plan:
    """The Plan of a workload the page describes (kinds.plan_of's keys; `data` an uploaded file's bytes),
    counted with the embedded model's tokenizer (in `models_dir`: tokens.embedded) as the catalogue's scenarios are
    (its caption says which);
    a WorkloadError's one sentence for a bad file or setting. Made once per description and file for every
    viewer (the latest PLANS_KEPT kept; a page redraws every second); `report` hears how far a large file is read
    while it is made (kinds.plan_of). Not st.cache_data: its cached function may not move a page's progress bar."""
    key = hashlib.sha256(json.dumps([desc, str(models_dir)], sort_keys=True, default=str).encode() + b"\0"
                         + (data or b"")).hexdigest()
    if (plan := _PLANS.get(key)) is not None:
        return plan
    plan = kinds.plan_of(desc, toks.embedded(models_dir), data, report)
    _PLANS[key] = plan
    while len(_PLANS) > PLANS_KEPT:  # two viewers at once may both drop the oldest: one KeyError is harmless
        try:
            del _PLANS[next(iter(_PLANS))]
        except (KeyError, StopIteration, RuntimeError):
            break
    return plan


def load_test_spec(shape: str, num_requests: int, max_tokens: int, *, max_len: int | None, ignore_eos: bool = False,
                   rate: float | None = None, concurrency: int | None = None, synthetic: bool = False,
                   warmup: bool = True, plan: Plan | None = None, ramp_up_s: float = 0.0,
                   burstiness: float = 1.0, seed: int | None = None, arrival: str = "poisson",
                   max_in_flight: int | None = None, ramp_strategy: str | None = None,
                   ramp_start_rps: float | None = None, request: dict[str, Any] | None = None,
                   models_dir: Path | None = None) -> LoadSpec:
    """The Load test page's workload: the lab's 10 prompts (or seeded synthetic ones) sent `shape`-wise,
    checked against the ready server's `max_len` (ConfigError), and named by what happens: how many
    requests were really in flight, or the arrival rate. With `warmup`, one batch as big as the measured
    part's is sent first and not counted (engine.measure.judge.warmth: the first batch of a size pays
    start-up work). A workload `plan` (workload_plan) replaces the prompts with its own requests (their lengths,
    turns or trace clock); `ramp_up_s`, `burstiness`, `arrival`, `max_in_flight` (a rate's cap) and a ramp by rate
    (`ramp_strategy`, `ramp_start_rps`) as LoadSpec's; `request`: the request's shape (measure.load.shape's
    request_fields: the endpoint, sampling, headers, extra body, LoRA modules). Named by the workload's kind (a scenario
    of the catalogue starts with it), else by its arrival. Synthetic prompts (seeded, or a length distribution's) are
    made from `seed`, a new one when None (seeds.fresh: no run finds another's prompts in the prefix cache), a length
    distribution's counted with the embedded model's tokenizer in `models_dir` (seeds.reseed)."""
    seed = seeds.fresh() if seed is None else seed
    plist = prompts.seeded_prompts(num_requests, seed) if synthetic else prompts.LAB_CONCURRENT
    spec = scenarios.get("concurrent-10").load_spec(
        prompts=list(plist), shape=shape, num_requests=num_requests, max_tokens=max_tokens, ignore_eos=ignore_eos,
        rate=rate, concurrency=concurrency if shape == "concurrency" else None,
        prompt_seed=seed if synthetic else None, arrival=arrival if shape == "poisson" else "poisson",
        burstiness=burstiness if shape == "poisson" else 1.0)
    if plan is not None:
        spec = seeds.reseed(plan.apply(spec), seed, models_dir=models_dir)
    if plan is None or plan.offsets is None:  # a trace keeps its own clock
        rated = shape == "poisson"
        spec = replace(spec, ramp_up_s=ramp_up_s if shape in ("concurrency", "poisson") else 0.0,
                       burstiness=burstiness if rated else 1.0, arrival=arrival if rated else "poisson",
                       ramp_strategy=ramp_strategy if rated else None, ramp_start_rps=ramp_start_rps if rated else None)
    if max_in_flight and spec.shape in ("poisson", "trace"):  # a cap holds back arrivals on a schedule
        spec = replace(spec, max_in_flight=max_in_flight)
    spec = with_request(spec, request)
    spec.validate(max_len)
    scenario = (plan.kind if plan is not None else "poisson" if shape == "poisson"
                else f"concurrent-{min(spec.in_flight(), spec.n)}")
    return replace(spec, label=seeds.described(spec), warmup=min(spec.in_flight(), spec.n) if warmup else 0,
                   scenario=scenario)


def rate_choice(spacing: str, cap: Any, ramp: str | None, value: float) -> dict[str, Any]:
    """load_test_spec's rate settings from the Load test page's choices: `spacing` "poisson" or "constant", `cap`
    the most in flight (0: none), `ramp` None, "time" (its seconds are ramp_up_s) or a ramp by request ("linear",
    "exponential") starting at `value` requests/s. A bad value is LoadSpec's one sentence when the spec is made."""
    out: dict[str, Any] = {"arrival": spacing, "max_in_flight": None if cap == 0 else cap}
    if ramp in ("linear", "exponential"):
        out.update(ramp_strategy=ramp, ramp_start_rps=value)
    return out


# The Tuning comparison's "what to send": the lab's prompts, or a shipped example workload
# (EXAMPLES: no upload there), each with the settings the Load test page offers first
_EXAMPLE_SETTINGS: dict[str, dict[str, Any]] = {"dataset": {"n": 40, "how": "random", "seed": 0},
                     "multi-turn": {"conversations": 8, "turns": 3}, "trace": {"time_scale": 1.0}}


def example_workloads() -> dict[str, dict]:
    """Each shipped example workload as a description (kinds.plan_of's keys), keyed "kind:file"."""
    return {f"{kind}:{name}": {"kind": kind, "file": name, **_EXAMPLE_SETTINGS[kind]}
            for kind, names in EXAMPLES.items() for name in names}


def tuning_spec(max_tokens: int, plan: Plan | None = None) -> LoadSpec:
    """The Tuning comparison's workload: the lab's step 4 (10 prompts at once, `max_tokens` each, one batch of
    warm-up), or a workload `plan` sent 10 in flight (a trace on its own clock), its answers held to at most
    `max_tokens` (the shortest max-model-len's limit). Every configuration gets this same spec."""
    scn = scenarios.get("tuning")
    spec = scn.load_spec(max_tokens=max_tokens)
    if plan is None:
        return spec
    spec = plan.apply(replace(spec, shape="concurrency", concurrency=scn.concurrency))
    if spec.max_tokens_each:
        each = [min(k, max_tokens) for k in spec.max_tokens_each]
        spec = replace(spec, max_tokens_each=each, max_tokens=max(each))
    return replace(spec, label=spec.describe())
