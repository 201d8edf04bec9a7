"""`run`'s arrival-rate options, as `vllm bench serve` takes them (--request-rate, --arrival, --max-concurrency,
--ramp-up-strategy/--ramp-up-start-rps/--ramp-up-end-rps): checked against the scenario before any server starts,
then the LoadSpec fields they set. See docs/internals.md#cli."""
from __future__ import annotations

import math

from engine.errors import ConfigError
from engine.measure.judge.slo import rates_said  # noqa: F401 - run.py's, where the CLI reads it
from engine.measure.load.spec import ARRIVALS, RAMP_STRATEGIES, check_in_flight, check_rate, parse_rates
from engine.messages import mark, say

OPTIONS = ("request_rate", "arrival", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")
LOWEST_RATE = 0.25  # an SLO search by rate starts here and doubles until the SLO misses (requests/s)


def add_rate_options(r) -> None:
    g = r.add_argument_group("arrival rate (as vllm bench serve; instead of the scenario's own arrival)")
    g.add_argument("--request-rate", type=float, metavar="R",
                   help="requests arrive at R per second: Poisson by default, gamma with --burstiness, evenly spaced "
                        "with --arrival constant; inf sends them all at once")
    g.add_argument("--arrival", choices=ARRIVALS,
                   help="how requests arriving at a rate are spaced: poisson (default; random), gamma (random, shaped "
                        "by --burstiness) or constant (every 1/R s)")
    g.add_argument("--max-concurrency", type=int, metavar="C",
                   help="at most C requests in flight while they arrive at a rate: an arrival past it waits for one "
                        "to end (its wait is recorded, not counted as the client's lateness)")
    g.add_argument("--ramp-up-strategy", choices=RAMP_STRATEGIES,
                   help="raise the rate request by request from --ramp-up-start-rps to --ramp-up-end-rps, linearly or "
                        "exponentially (vllm bench serve's ramp-up; instead of --request-rate)")
    g.add_argument("--ramp-up-start-rps", type=float, metavar="R", help="the ramp's first rate (requests/s)")
    g.add_argument("--ramp-up-end-rps", type=float, metavar="R", help="the ramp's last rate (requests/s)")
    g.add_argument("--rates", metavar="LIST",
                   help="the sweep scenario at these arrival rates instead of numbers in flight, e.g. 0.5,1,2,4 "
                        "(requests/s; each level at least 15 s of arrivals)")
    g.add_argument("--search-by", choices=("concurrency", "rate"),
                   help="what the slo-search scenario searches: the most requests in flight (default) or the highest "
                        f"arrival rate that meets the SLO (from {LOWEST_RATE:g}/s, doubling until it misses, then "
                        "bisection; --request-rate sets the highest)")


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def by_rate_levels(scn, args) -> bool:
    """Whether a sweep or an SLO search runs at arrival rates (--rates, --search-by rate) instead of numbers in
    flight."""
    return (scn.kind == "sweep" and args.rates is not None) or (scn.kind == "slo-search" and args.search_by == "rate")


def at_rate(args) -> bool:
    """Whether the options make requests arrive at a rate (a finite --request-rate or a ramp by rate)."""
    rate = getattr(args, "request_rate", None)
    return (rate is not None and math.isfinite(rate)) or getattr(args, "ramp_up_strategy", None) is not None


def check_rate_options(scn, args, how: dict[str, str]) -> None:
    """One sentence (ConfigError) for a rate option out of bounds, out of place, or in conflict; `how`: what each
    arrival pattern does, in run_options' words."""
    if args.rates is not None and scn.kind != "sweep":
        raise ConfigError(say("--rates are the levels of the sweep scenario: run sweep with it, or give --request-rate "
                              "for one rate."))
    if args.search_by is not None and scn.kind != "slo-search":
        raise ConfigError(say("--search-by says what the slo-search scenario searches: run slo-search with it."))
    named = [o for o in OPTIONS if getattr(args, o, None) is not None]
    by_rate = by_rate_levels(scn, args)
    if scn.kind in ("sweep", "slo-search") and named:  # a level's arrivals; the search's top rate
        allowed = ("arrival", "max_concurrency", *(("request_rate",) if scn.kind == "slo-search" else ()))
        if bad := next((o for o in named if not (by_rate and o in allowed)), None):
            levelled = {"sweep": say("runs a closed loop at each level"),
                        "slo-search": say("finds its levels by bisection")}[scn.kind]
            by = "--rates LIST" if scn.kind == "sweep" else "--search-by rate"
            raise ConfigError(say("The {name} scenario {how}, so {flag} does not apply: leave it out, or give {by} to "
                                  "run it at arrival rates.", name=scn.name, how=levelled, flag=_flag(bad), by=by))
    if not named:
        return
    if scn.kind not in ("vllm", "tuning", "sweep", "slo-search"):
        what = {"naive": say("runs transformers itself, with no server")}.get(scn.kind, scn.kind)
        raise ConfigError(say("The {name} scenario {how}, so {flag} does not apply: leave it out, or pick a load "
                              "scenario (python -m engine list).", name=scn.name, how=what, flag=_flag(named[0])))
    if getattr(args, "trace", None) is not None or scn.shape == "trace":
        raise ConfigError(say("A trace brings its own clock, so {flag} does not apply: leave it out.",
                              flag=_flag(named[0])))
    rate, strategy = args.request_rate, args.ramp_up_strategy
    if rate is not None and not (math.isinf(rate) and rate > 0):
        check_rate(rate, mark("--request-rate"))
    ramp = ("ramp_up_start_rps", "ramp_up_end_rps")
    if strategy is None and (part := next((o for o in ramp if getattr(args, o) is not None), None)):
        raise ConfigError(say("{flag} is part of a ramp by rate: give --ramp-up-strategy linear or exponential with "
                              "it.", flag=_flag(part)))
    if strategy is not None:
        if rate is not None:
            raise ConfigError(say("A ramp by rate sets the rate itself, from --ramp-up-start-rps to --ramp-up-end-rps: "
                                  "leave --request-rate out."))
        if args.ramp_up_start_rps is None or args.ramp_up_end_rps is None:
            raise ConfigError(say("--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps."))
        check_rate(args.ramp_up_start_rps, mark("--ramp-up-start-rps"))
        check_rate(args.ramp_up_end_rps, mark("--ramp-up-end-rps"))
        if args.ramp_up_start_rps > args.ramp_up_end_rps:
            raise ConfigError(say("--ramp-up-start-rps ({start:g}) is above --ramp-up-end-rps ({end:g}): a ramp rises; "
                                  "start lower, or end higher.", start=args.ramp_up_start_rps,
                                  end=args.ramp_up_end_rps))
        if getattr(args, "ramp_up", None) is not None:
            raise ConfigError(say("--ramp-up raises the rate over time and --ramp-up-strategy request by request: "
                                  "give only one of them."))
    rated = at_rate(args) or scn.shape == "poisson" or by_rate
    if args.concurrency is not None and (rate is not None or strategy is not None):
        raise ConfigError(say("--concurrency keeps a number of requests in flight, and {flag} sends them at a rate: "
                              "cap them with --max-concurrency instead.",
                              flag="--request-rate" if rate is not None else "--ramp-up-strategy"))
    if args.arrival is not None:
        if not rated:
            raise ConfigError(say("--arrival spaces requests that arrive at a rate, and the {name} scenario {how}: "
                                  "give --request-rate with it.", name=scn.name, how=how.get(scn.shape, scn.shape)))
        burstiness = getattr(args, "burstiness", None)
        if args.arrival == "gamma" and burstiness in (None, 1):
            raise ConfigError(say("Gamma arrivals are shaped by their burstiness: give --burstiness B (1 would be "
                                  "Poisson; below 1 burstier, above 1 steadier)."))
        if args.arrival in ("poisson", "constant") and burstiness not in (None, 1):
            raise ConfigError(say("--burstiness shapes gamma arrivals, and --arrival {arrival} is not: leave "
                                  "--burstiness out, or give --arrival gamma.", arrival=args.arrival))
    if args.max_concurrency is not None:
        check_in_flight(args.max_concurrency, mark("--max-concurrency"))
        if not rated and rate is None:
            raise ConfigError(say("--max-concurrency caps requests that arrive at a rate, and the {name} scenario "
                                  "{how}: give --request-rate with it.", name=scn.name,
                                  how=how.get(scn.shape, scn.shape)))


def rate_over(scn, args) -> dict:
    """The LoadSpec fields the rate options set (none when none is given). --request-rate inf sends all at once
    (with --max-concurrency: that many in flight, as vllm bench serve's semaphore does). A sweep or search by rate:
    the arrivals of its levels (their rates the levels' own; --request-rate the search's top)."""
    rate, strategy = args.request_rate, args.ramp_up_strategy
    over: dict = {}
    if by_rate_levels(scn, args):  # each level sets its own rate; the spec arrives at a rate from the first
        first = parse_rates(args.rates)[0] if scn.kind == "sweep" else LOWEST_RATE
        over.update(shape="poisson", rate=first)
        rate = None
    elif rate is not None and math.isinf(rate):
        if args.max_concurrency is not None:
            return {"shape": "concurrency", "concurrency": args.max_concurrency}
        return {"shape": "burst"}
    if rate is not None:
        over.update(shape="poisson", rate=rate)
    if strategy is not None:
        over.update(shape="poisson", rate=args.ramp_up_end_rps, ramp_strategy=strategy,
                    ramp_start_rps=args.ramp_up_start_rps)
    if args.arrival is not None:
        over["arrival"] = args.arrival
        if args.arrival != "gamma" and getattr(args, "burstiness", None) is None:
            over["burstiness"] = 1.0  # the scenario's own burstiness (bursty's) gives way to the arrivals asked for
    if args.max_concurrency is not None:
        over["max_in_flight"] = args.max_concurrency
    return over
