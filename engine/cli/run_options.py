"""`run`'s options checked against the scenario before any server starts or request is sent: one
sentence for an option out of bounds or one the scenario would ignore."""
from __future__ import annotations

import os
from pathlib import Path

from engine.cli.server import flag, given
from engine.errors import ConfigError
from engine.measure.load.spec import check_max_tokens
from engine.messages import mark, say

_HOW: dict[str, str] = {
    "sequential": mark("sends its requests one after another"), "burst": mark("sends all its requests at once"),
    "poisson": mark("sends its requests at random times at a set rate"),
    "concurrency": mark("keeps a number of requests in flight"), "trace": mark("replays a trace on its own clock")}
# The ServerConfig fields a comparison's configurations set, as the options that would set them here (a
# squeezed KV cache is --kv-cache-gib on the command line).
_OPTION_OF = {"cpu_kvcache_gib": "kv_cache_gib", "kv_cache_requests": "kv_cache_gib"}


def slo_of(args):
    """The SLO --goodput (as vllm bench serve takes it) or --slo-ttft-ms / --slo-tpot-ms give, checked; None
    when none is given."""
    from engine.measure.judge.slo import Slo

    if args.goodput is not None:
        if named := [f for f, v in (("--slo-ttft-ms", args.slo_ttft_ms), ("--slo-tpot-ms", args.slo_tpot_ms))
                     if v is not None]:
            raise ConfigError(say("--goodput and {flag} both set the SLO: give its limits in --goodput only.",
                                  flag=named[0]))
        return Slo.parse(args.goodput)
    if args.slo_ttft_ms is None and args.slo_tpot_ms is None:
        return None
    return Slo(ttft_ms=args.slo_ttft_ms, tpot_ms=args.slo_tpot_ms)


def check_run_options(scn, args) -> list | None:
    """Refuse, with one sentence, an option out of bounds or one the scenario would ignore (before any
    server starts or request is sent); return the sweep's levels (rates with --rates; None for other scenarios, or
    where the server's capacity sets them) or the search's lowest and highest (None: not given)."""
    from engine.measure.judge.cost import check_price

    from engine.cli.rate_options import check_rate_options
    from engine.cli.workload_options import check_workload_options

    _check_servers(scn, args)
    check_workload_options(scn, args, _HOW)
    check_rate_options(scn, args, _HOW)
    from engine.cli.request_options import asked

    if scn.kind == "naive" and (named := asked(args)):
        raise ConfigError(say("The naive scenario runs transformers itself, with no HTTP request to shape: leave "
                              "{flag} out.", flag=named[0]))
    if args.detach and scn.kind == "naive":
        raise ConfigError(say("The naive scenario starts no server to leave running: leave --detach out."))
    sets = tuple(sorted({_OPTION_OF.get(k, k) for c in scn.configs for k in c}))
    if scn.kind == "tuning" and (named := given(args, sets)):
        raise ConfigError(say("The tuning scenario sets {flag} itself for each configuration it compares: leave "
                              "{flag} out.", flag=flag(named[0])))
    if args.max_tokens is not None:
        check_max_tokens(args.max_tokens)
    check_price(args.price_per_gpu_hour)
    _check_repeats(scn, args)
    if scn.kind == "slo-search" and args.slo_ttft_ms is None and args.slo_tpot_ms is None and args.goodput is None:
        raise ConfigError(say("The slo-search scenario looks for the most requests in flight that meet an SLO: give "
                              "--slo-ttft-ms and/or --slo-tpot-ms, or --goodput ttft:MS tpot:MS e2el:MS."))
    return _levels(scn, args)


def _check_repeats(scn, args) -> None:
    """--repeats: a whole number of at least 1, for one load test on one server or each tuning configuration."""
    if args.repeats is None:
        return
    if args.repeats < 1:
        raise ConfigError(say("--repeats must be a whole number of at least 1, not {n}.", n=args.repeats))
    if scn.kind not in ("vllm", "tuning"):
        raise ConfigError(say("--repeats repeats one load test or each tuning configuration, and {name} is neither: "
                              "pick a load or tuning scenario (python -m engine list), or leave --repeats out.",
                              name=scn.name))
    if args.versus is not None:
        raise ConfigError(say("--repeats and --versus cannot be combined: repeat the load test on one server."))
    from engine.runs.runner import MAX_REPEATS

    if args.repeats > MAX_REPEATS and not args.many_repeats:
        n, last = args.repeats, _last_duration(scn, args.settings.db)
        if last is None:
            raise ConfigError(say("--repeats {n} runs the load test {n} times, one after another; the Load test page "
                                  "stops at {most}: give --repeats {most} or fewer, or add --many-repeats to run all "
                                  "{n}.", n=n, most=MAX_REPEATS))
        raise ConfigError(say("--repeats {n} runs the load test {n} times, one after another (about {total}, at the "
                              "{each} its last run in the history measured, warm-ups not counted); the Load test page "
                              "stops at {most}: give --repeats {most} or fewer, or add --many-repeats to run all {n}.",
                              n=n, total=_hms(n * last), each=_hms(last), most=MAX_REPEATS))


def _last_duration(scn, history: Path) -> float | None:
    """The seconds the latest run of the same scenario in the history measured (None when none): what one repeat
    will take, about."""
    from engine.results.store import RunStore

    try:
        runs = RunStore(history).list(limit=200, kind="vllm")
        last = next((r for r in runs if r.scenario == scn.name and r.duration > 0), None)
    except Exception:  # noqa: BLE001 - an estimate only: a history that cannot be read gives none
        last = None
    return None if last is None else last.duration


def _hms(s: float):
    """A length of time as a person reads it: '45 s', '12 min', '3 h 20 min'."""
    if s < 90:
        return say("{seconds} s", seconds=f"{s:.0f}")
    if s < 5400:
        return say("{m} min", m=f"{s / 60:.0f}")
    return say("{h} h {m} min", h=int(s // 3600), m=int(s % 3600 // 60))


def _check_servers(scn, args) -> None:
    """--url, --versus and the options that only a server this command starts takes."""
    from engine.runs import check_url

    if args.versus is not None or args.versus_api_key_env is not None:
        if args.url is None or args.versus is None:
            raise ConfigError(say("--versus compares two running servers: give both --url A and --versus B."))
        if scn.kind != "vllm":
            raise ConfigError(say("--versus sends one load test to two servers at once, and {name} is not one: pick "
                                  "a load scenario (python -m engine list).", name=scn.name))
        check_url(args.versus)
        if args.versus_api_key_env and os.environ.get(args.versus_api_key_env) is None:
            raise ConfigError(say("--versus-api-key-env names {var}, which is not set: export it first.",
                                  var=args.versus_api_key_env))
    if args.url is not None:
        if scn.kind == "naive":
            raise ConfigError(say("The naive scenario runs transformers itself, with no server: leave --url out."))
        if scn.kind == "tuning":
            raise ConfigError(say("The tuning scenario restarts the server with each setting: leave --url out."))
        check_url(args.url)
        if args.detach:
            raise ConfigError(say("--detach leaves running a server this command starts, and with --url it starts "
                                  "none: leave --detach out."))
        if named := given(args):  # the server is already running: its own settings hold
            raise ConfigError(say("{flag} sets up a server the app starts, but --url points at one already running, "
                                  "which keeps its own settings: leave {flag} out, or leave --url out to start a "
                                  "server.", flag=flag(named[0])))
    elif args.model_name:
        raise ConfigError(say("--model-name names the model of the server at --url: leave it out, the app names the "
                              "model of a server it starts."))


def _without(args, option: str):
    """`args` with `option` taken as used (a copy: the command still reads the option itself)."""
    import argparse

    return argparse.Namespace(**{**vars(args), option: None})


def _levels(scn, args) -> list | None:
    """A sweep's levels from --levels or --concurrency (its top level); both refused for other scenarios."""
    from engine.measure.load.spec import check_in_flight, parse_levels
    from engine.measure.workloads.scenarios import sweep_levels

    from engine.cli.rate_options import LOWEST_RATE, parse_rates

    if scn.kind == "slo-search":  # its lowest and highest level (None: the server's capacity says, or doubling)
        if args.levels is not None:
            raise ConfigError(say("The slo-search scenario finds its levels by bisection, so --levels does not "
                                  "apply: give its highest level with --concurrency."))
        if args.search_by == "rate":
            if args.concurrency is not None:
                raise ConfigError(say("A search by rate looks for the highest arrival rate: give its highest with "
                                      "--request-rate, not --concurrency."))
            if args.request_rate is not None and not LOWEST_RATE <= args.request_rate < float("inf"):
                raise ConfigError(say("The search's highest rate must be a number of requests per second from "
                                      "{lowest:g} on, not {rate:g}.", lowest=LOWEST_RATE, rate=args.request_rate))
            return [LOWEST_RATE, args.request_rate]
        if args.concurrency is not None:
            check_in_flight(args.concurrency, mark("The search's highest level (requests in flight)"))
        return [scn.levels[0], args.concurrency]
    if scn.kind != "sweep":
        how = mark("runs transformers itself, with no server") if scn.kind == "naive" else _HOW.get(scn.shape, "")
        if scn.kind != "naive" and scn.shape == "concurrency" and args.concurrency is not None:
            check_in_flight(args.concurrency)  # its requests in flight: the scenario's own limit, changed
            args = _without(args, "concurrency")
        for option, value in (("--concurrency", args.concurrency), ("--levels", args.levels)):
            if value is not None:
                raise ConfigError(say("The {name} scenario {how}, so {flag} does not apply: leave it out, or run the "
                                      "sweep scenario to choose the requests in flight.", name=scn.name, how=how,
                                      flag=option))
        return None
    if args.rates is not None:
        if args.levels is not None or args.concurrency is not None:
            raise ConfigError(say("--rates sweeps arrival rates, and --levels and --concurrency numbers in flight: "
                                  "give only --rates."))
        return parse_rates(args.rates)
    if args.concurrency is not None and args.levels is not None:
        raise ConfigError(say("--levels and --concurrency both choose the sweep's levels: give only one of them."))
    if args.levels is not None:
        return parse_levels(args.levels)
    if args.concurrency is not None:
        check_in_flight(args.concurrency, mark("The sweep's top level (requests in flight)"))
        return sweep_levels(scn, args.concurrency)
    return None  # the server's capacity says, once it is known (runs.capacity)
