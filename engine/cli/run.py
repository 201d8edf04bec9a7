"""`list` and `run`: a scenario of the catalogue (measure/workloads/scenarios.py) through engine.runs, the
path the app's jobs take, in the foreground; each run printed (summary.py) and saved to the history."""
from __future__ import annotations

import os
import time

from engine.cli.output import check_writable, say_line, write
from engine.cli.rate_options import add_rate_options, by_rate_levels, rate_over, rates_said
from engine.cli.request_options import add_request_options, request_of
from engine.cli.run_options import check_run_options, slo_of
from engine.cli.server import add_server_options, config, own_server
from engine.cli.summary import repeats_table, summary_table
from engine.cli.workload_options import add_workload_options, workload_of
from engine.errors import ConfigError
from engine.measure.load.spec import check_max_tokens
from engine.messages import mark, say


def register(sub) -> None:
    sub.add_parser("list", help="list the scenarios").set_defaults(func=_list)
    r = sub.add_parser("run", help="run a scenario headless and save it to the history")
    r.add_argument("scenario")
    r.add_argument("--url", help="an already running server, its root, /v1 or a router's prefix (else one is started "
                                 "with the options below); its API key, if any, from $OPENAI_API_KEY")
    r.add_argument("--model-name", help="served model name at --url (default: asked from /v1/models)")
    r.add_argument("--versus", metavar="URL_B",
                   help="a second running server: the same load goes to --url and to it at once, on one clock, "
                        "and both runs are saved as a pair")
    r.add_argument("--versus-api-key-env", metavar="VAR",
                   help="the environment variable holding the --versus server's API key (default: none sent)")
    r.add_argument("--max-tokens", type=int)
    r.add_argument("--detach", action="store_true",
                   help="leave the server running at the end, with the last settings (the app adopts it)")
    r.add_argument("--concurrency", type=int,
                   help="the sweep's top level, or the requests in flight of a scenario that keeps some in flight")
    r.add_argument("--levels", help="sweep levels, e.g. 1,2,4,8")
    r.add_argument("--client-processes", type=int, metavar="N",
                   help="client processes sending the load, each with its own event loop and connections (default: "
                        "one per 64 requests in flight, at most a quarter of the cores)")
    r.add_argument("--repeats", type=int, metavar="N",
                   help="run the load test (or each tuning configuration) N times and print the median and range of "
                        "its throughput and TTFT, a repeat far off flagged; tuning judges each configuration against "
                        "the first beyond noise (the prefix cache emptied between repeats where the server allows it)")
    r.add_argument("--many-repeats", action="store_true",
                   help="allow more than 10 repeats (the Load test page's limit): they run one after another")
    r.add_argument("--json", help="also write the runs as JSON here")
    r.add_argument("--price-per-gpu-hour", type=float, metavar="PRICE",
                   help="print what a million output tokens cost at this price per GPU-hour (the whole machine, "
                        "over the measured wall time)")
    r.add_argument("--slo-ttft-ms", type=float, metavar="MS",
                   help="judge each run by this TTFT limit and report its goodput (vllm bench serve --goodput ttft:MS)")
    r.add_argument("--slo-tpot-ms", type=float, metavar="MS",
                   help="judge each run by this TPOT limit and report its goodput (--goodput tpot:MS)")
    r.add_argument("--goodput", nargs="+", metavar="KEY:MS",
                   help="judge each run by these limits in ms and report its goodput, as vllm bench serve "
                        "--goodput: ttft:MS, tpot:MS and/or e2el:MS (end-to-end latency), e.g. ttft:200 e2el:2000")
    add_workload_options(r)
    add_request_options(r)
    add_rate_options(r)
    add_server_options(r)
    r.set_defaults(func=_run)


def _list(args) -> int:
    from engine.measure.workloads.scenarios import SCENARIOS

    for s in SCENARIOS.values():
        say_line(f"{s.name:24} {s.description}")
    return 0


def _run(args) -> int:
    """Against --url (and --versus), or a server started here (every option checked before it starts)
    and stopped at the end."""
    from engine import paths
    from engine.runs.ledger import WarmthLedger
    from engine.cli.console import Console
    from engine.measure.workloads import scenarios
    from engine.observe import hardware
    from engine.results.store import RunStore
    from engine.runs import Runner, Target

    scn = scenarios.get(args.scenario)
    levels = check_run_options(scn, args)
    by = "rate" if by_rate_levels(scn, args) else "concurrency"
    slo = slo_of(args)
    if args.json:
        check_writable(args.json)
    load = _load(scn, args)  # its file read and its workload built before any server is asked
    _looked_at(load.workload)
    store = RunStore(args.settings.db)
    # The key as `vllm bench serve` takes it: from the environment, never a flag (a flag shows in `ps`).
    target = Target.at(args.url, args.model_name, os.environ.get("OPENAI_API_KEY")) if args.url else None
    cfg, spec = (None, None) if args.url else config(args)
    versus = None
    if args.versus and target is not None:  # (check_run_options: --versus comes only with --url)
        # the second server's key from the variable named, as the first's from OPENAI_API_KEY
        versus = Target.at(args.versus, None, os.environ.get(args.versus_api_key_env) if args.versus_api_key_env
                           else None)
        if versus.same_server(target):
            raise ConfigError(say("--versus {url} is the --url server itself: give a second server's address.",
                                  url=args.versus))
    for t in (target, versus):
        if t is not None:
            t.aim(load)  # what the running server accepts, before a request is sent

    def save(run):
        store.save(run)
        return run

    # a server at --url may have run these batch sizes before: the history says (cold or warm runs)
    warmth = WarmthLedger.of_history(lambda: (r.extra for r in store.list(kind="vllm")))
    runner = Runner(save, progress=Console(log_dir=args.settings.home / "logs"), slo=slo, warmth=warmth,
                    models_dir=args.settings.models)
    # the CPU's memory bandwidth, for each run's record: measured once per boot and kept in this command's runtime
    # folder, before any server this command starts competes for it
    hardware.describe(paths.runtime_dir(args.settings))
    if target is not None and versus is not None:
        _deadline(load)
        results = runner.side_by_side(target, versus, load)
        _sharing(target, versus)
    elif target is not None:
        _deadline(load)
        results = _measure(runner, scn, load, levels, target, args.repeats, args.seed is not None, by)
    elif scn.kind == "naive" and spec is not None:  # (with no --url: check_run_options) the model config() read
        if args.max_tokens is not None:
            check_max_tokens(args.max_tokens, spec.max_len, of=mark("this model's context length"), fix="")
        results = [runner.naive(scn.naive_spec(spec.path, random_weights=spec.placeholder_text,
                                               max_new_tokens=args.max_tokens))]
    else:
        results = _on_own_server(runner, scn, cfg, spec, load, levels, args.detach, args.repeats,
                                 args.seed is not None, by, settings=args.settings)
    complete = _said(results, scn, slo, args.price_per_gpu_hour, by)
    if args.json:
        write(args.json, store.export_json([r.id for r in results]), saved=True)
    return 0 if complete else 1


def _load(scn, args):
    """What the scenario sends, with the workload and arrival the options ask for (workload_options): named by
    what it sends when they changed it, checked as a page's load is (one sentence)."""
    from dataclasses import replace

    sends, data, over = workload_of(scn, args)
    over.update(rate_over(scn, args))
    levelled = scn.kind in ("sweep", "slo-search")  # --concurrency is their top level, not each run's limit
    if args.concurrency is not None and not levelled:  # run_options let it through: a scenario's limit
        over["concurrency"] = args.concurrency
    load = sends.load_spec(data=data, num_requests=8 if levelled else None, max_tokens=args.max_tokens,
                           report=Reading(args.dataset or args.trace or sends.workload.get("file") or ""),
                           seed=args.seed, models_dir=args.settings.models, **over)
    if sends is not scn or over:
        load = replace(load, label=load.describe()).validate()
    if args.client_processes is not None:
        if args.client_processes < 1:
            raise ConfigError(say("--client-processes {n} is not a number of processes: give 1 or more, or leave it "
                                  "out to let the load choose.", n=args.client_processes))
        load = replace(load, workers=args.client_processes)
    return replace(load, **shaped) if (shaped := request_of(args)) else load  # replace validates it


class Reading:
    """How far a large workload file is read, on the terminal: a line at most every 2 s once it takes longer than
    that (a small file says nothing), and the last line when it ends."""

    EVERY_S = 2.0

    def __init__(self, name: str) -> None:
        self.name, self.said = os.path.basename(name), False
        self.last: float | None = None

    def __call__(self, done: int, total: int, what) -> None:
        now = time.monotonic()
        if self.last is None:  # timed from the first report: loading the tokenizer is not reading the file
            self.last = now
        if now - self.last >= self.EVERY_S or (self.said and done == total):
            say_line(f"  {self.name}: {done:,} of {total:,} {what}")
            self.last, self.said = now, True


def _looked_at(workload: dict | None) -> None:
    """A trace said before it runs: how long the replay takes, and what looks wrong in its timestamps."""
    if workload is None or workload.get("kind") != "trace":
        return
    from engine.measure.workloads import traces

    say_line(f"{workload.get('name')}: {traces.duration_said(workload)}")
    for warning in traces.checks(workload):
        say_line(f"warning: {warning}")


def _deadline(load) -> None:
    """Every wait has an end: said once the options passed and before the first wait."""
    from engine.measure.load.spec import deadline_said

    say_line(deadline_said(load.max_tokens, load.deadline_s))


class Runs(list):
    """The runs a command made, and what they found together (an SLO search's answer)."""

    search = None


def _measure(runner, scn, load, levels, target, repeats: int | None = None, fixed_seed: bool = False,
             by: str = "concurrency") -> list:
    """The scenario's runs on `target`; a sweep's or a search's levels not given follow the server's capacity
    (runs.capacity: its KV cache, said before the first level), a search by rate doubles until the SLO misses."""
    if scn.kind == "sweep" and by == "rate":
        return runner.rate_sweep(load, levels, target)
    if scn.kind == "sweep":
        return runner.sweep(load, levels or _capacity(scn, load, target).levels, target)
    if scn.kind == "slo-search":  # bisection between the lowest and the highest level (run_options._levels)
        low, high = levels
        if by == "concurrency" and high is None:
            cap = _capacity(scn, load, target, doubling=True)
            high = cap.levels[-1] if cap.fits is not None else None  # None: doubling from the lowest
        elif high is None:
            say_line(f"The search starts at {low:g} requests/s and doubles the rate until the SLO misses, then "
                     "bisects.")
        tolerance = low if by == "rate" else 1
        search = runner.slo_search(load, target, runner.slo, low=low, high=high, tolerance=tolerance, by=by)
        out = Runs(search.runs)
        out.search = search
        return out
    if repeats:
        return runner.repeat(load, target, repeats, fixed_seed)
    return [runner.load(load, target)]


def _capacity(scn, load, target, doubling: bool = False):
    """What `target` holds at once of this load's requests (runs.capacity), said once; `doubling`: a search that
    doubles its level where the server does not say."""
    from engine.runs.capacity import capacity

    cap = capacity(target, (load.max_tokens or 0) + scn.prompt_tokens_guess, list(scn.levels))
    if cap.fits is None and doubling:
        say_line("The server does not say how big its KV cache is: the search doubles the requests in flight from 1 "
                 "until the SLO misses, then bisects.")
    else:
        say_line(str(cap.said))
    return cap


def _sharing(a, b) -> None:
    """Two servers on this machine share its CPU or its one GPU: said after their numbers."""
    if a.on_this_machine and b.on_this_machine:
        from engine.observe import hardware, nvml
        from engine.serving.cluster import sharing_said

        if why := sharing_said(hardware.default_device(), len(nvml.devices())):
            say_line(f"note: both servers run on this machine. {why}")


def _on_own_server(runner, scn, cfg, spec, load, levels, detach: bool, repeats: int | None = None,
                   fixed_seed: bool = False, by: str = "concurrency", *, settings) -> list:
    """The scenario on a server this command starts (tuning: one per configuration), stopped at the end
    unless --detach; a failed run never leaves a server behind."""
    from engine.measure.workloads import scenarios
    from engine.runs import Target, check_tuning

    configs = scenarios.configs_for(scn, cfg) if scn.kind == "tuning" else [cfg]
    if scn.kind == "tuning":
        check_tuning(configs, load, model_max_len=spec.max_len)
    else:
        check_max_tokens(load.max_tokens, cfg.max_model_len or spec.max_len,
                         of=mark("the max-model-len the server starts with"),
                         fix=mark(", or give a longer --max-model-len"))
    srv = own_server(cfg.port, settings)  # a run starts and stops its own, never one found running
    _deadline(load)
    done = False
    try:
        if scn.kind == "tuning":
            results = runner.tuning(srv, configs, load, model_max_len=spec.max_len,
                                    labels=list(scn.config_labels) or None, repeats=repeats or 1)
        else:
            srv.start_and_wait(cfg, model_max_len=spec.max_len, log=say_line)
            results = _measure(runner, scn, load, levels, Target.of(srv), repeats, fixed_seed, by)
        done = True
    finally:
        if not (done and detach):
            srv.stop()
    if detach:  # as `serve --detach`: its record lets the app (or `stop`) take it over
        say_line(f"left running (pid {srv.snapshot().pid}) with the last settings; the app adopts it, or stop it "
                 f"with: python -m engine stop --port {cfg.port}")
    return results


def _said(results: list, scn, slo, price_per_gpu_hour: float | None, by: str = "concurrency") -> bool:
    """Each run's summary and id, then what the scenario's runs say together (prefix caching, a sweep's knee);
    False when repeats stopped before all ran (the command then exits 1)."""
    from engine.measure.judge import kvcache

    for r in results:
        say_line(summary_table(r, price_per_gpu_hour))
        if scn.name == "kv-squeeze" and (sentence := kvcache.said(r)):
            say_line(f"  {sentence}")
        say_line(f"saved as run {r.id} (python -m engine report {r.id} -o report.html)")
    if scn.name == "prefix-cache":
        from engine.measure.judge import prefix

        if both := prefix.pair(results):
            say_line(prefix.sentence(*both))
    if slo is not None and scn.kind == "sweep" and by == "rate":
        say_line(rates_said(results, slo))
    elif slo is not None and scn.kind == "sweep":
        from engine.measure.judge import slo as slos

        say_line(slos.knee_said(slos.levels(results, slo), slo))
    if (search := getattr(results, "search", None)) is not None:  # Runs
        say_line(search.said)
    from engine.measure.judge import repeats, verdict

    sets = repeats.sets(results)
    for runs in (g for g in sets if len(g) > 1):  # each set of repeats: its median and range
        say_line(repeats_table(runs))
    if scn.kind == "tuning" and len(sets) > 1:  # each configuration against the first, beyond noise or not
        first = sets[0]
        for runs in sets[1:]:
            if v := verdict.compare_runs(first, runs, "output_throughput", name="Output throughput",
                                         label_a=first[0].label, label_b=runs[0].label):
                say_line(v.said)
    if len(results) == 2 and results[0].extra.side_by_side.pair == results[1].extra.side_by_side.pair != "":
        a, b = results  # --versus: which server did better, only beyond the noise
        for v in verdict.of_pair([a], [b], *verdict.labels_apart(a, b, a.label, b.label)):
            say_line(v.said)
    if (stopped := getattr(results, "stopped", None)) is not None:  # Repeats cut short: why the rest did not run
        say_line(stopped)
        return False
    return True
