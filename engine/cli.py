"""`python -m engine ...`: the same engine as the dashboard, headless — for GPU boxes, scripts and CI.

  python -m engine model prepare [--shape-only]
  python -m engine serve  [--model embedded|shape-only|PATH|hub:ID] [--max-model-len N] ... [--detach]
  python -m engine status | stop [--port P]
  python -m engine run SCENARIO [--url URL | --model ... [--detach]] [--slo-ttft-ms MS --slo-tpot-ms MS]
                                [--json OUT] [--price-per-gpu-hour PRICE]
  python -m engine run SCENARIO --url A --versus B [--versus-api-key-env VAR]   (two servers at once)
                                                                          (scenarios: python -m engine list)
  python -m engine cluster --head ADDRESS --nodes N --gpus-per-node G [--model ...]   (Ray, several machines)
  python -m engine export [--format json|csv] [--out FILE] [RUN_ID ...]
  python -m engine import FILE ...
  python -m engine report RUN_ID [RUN_ID ...] [-o report.html]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from engine.errors import ConfigError, LabError
from engine.measure.spec import check_max_tokens

DEFAULT_PORT = int(os.environ.get("SERVING_LAB_VLLM_PORT", "9000"))


def _print(msg: str) -> None:
    print(msg, flush=True)


# -- models -----------------------------------------------------------------------------------
def _cmd_model_prepare(args) -> int:
    from engine.serving import models

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    path = models.prepare_embedded(log=lambda m: _print(f"  {m}"))
    _print(f"embedded model ready: {path}")
    if args.shape_only:
        _print(f"shape-only Llama 3 8B ready: {models.prepare_shape_only()}")
    return 0


# -- server -----------------------------------------------------------------------------------
# The options that set up a server the app starts. None (or False) = not given: the lab's default, and
# `run --url` can tell the options it would ignore.
SERVER_OPTIONS = ("model", "port", "host", "dtype", "max_model_len", "gpu_memory_utilization", "kv_cache_gib",
                  "max_num_seqs", "enforce_eager", "tensor_parallel_size", "pipeline_parallel_size",
                  "data_parallel_size", "gpus", "extra")
GPU_OPTIONS = ("gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpus")


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="embedded (default) | shape-only | a folder | hub:owner/name")
    p.add_argument("--port", type=int, help=f"default {DEFAULT_PORT} (SERVING_LAB_VLLM_PORT)")
    p.add_argument("--host", help="default 127.0.0.1")
    p.add_argument("--dtype")
    p.add_argument("--max-model-len", type=int, help="default: 2048, or less when the model's limit is lower")
    p.add_argument("--gpu-memory-utilization", type=float, help="GPU only: the fraction vLLM may take (default 0.85)")
    p.add_argument("--kv-cache-gib", type=float, help="CPU only: the KV cache in GiB (default 2; a fraction such as 0.01 squeezes it)")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--tensor-parallel-size", type=int, help="GPU only: GPUs to split the model over (default 1)")
    p.add_argument("--pipeline-parallel-size", type=int,
                   help="GPU only: split the model by groups of layers over this many GPUs (default 1)")
    p.add_argument("--data-parallel-size", type=int,
                   help="GPU only: whole copies of the model, each serving a share of the requests (default 1)")
    p.add_argument("--gpus", help="GPU only: which GPUs, e.g. 0,1 (CUDA_VISIBLE_DEVICES; default all)")
    p.add_argument("--extra", help='other vLLM flags, quoted: --extra "--seed 0"')


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _given(args, options=SERVER_OPTIONS) -> list[str]:
    return [o for o in options if getattr(args, o, None) not in (None, False)]


def _config(args):
    """The server settings and model the command line asks for (the lab's defaults elsewhere), checked
    before anything starts: an option this machine's device would ignore is refused."""
    from engine.observe import hardware
    from engine.serving import models
    from engine.serving.config import ServerConfig, parse_extra_args

    device = hardware.default_device()
    if device == "cpu":
        for option in GPU_OPTIONS:
            if getattr(args, option) is not None:
                raise ConfigError(f"{_flag(option)} applies to a GPU, and vLLM runs on this machine's CPU: leave it "
                                  "out (size the CPU's KV cache with --kv-cache-gib).")
    elif args.kv_cache_gib is not None:
        raise ConfigError("--kv-cache-gib sizes the CPU build's KV cache, and vLLM runs on a GPU here: set "
                          "--gpu-memory-utilization instead.")
    spec = models.resolve(args.model or "embedded")
    cfg = ServerConfig.for_model(
        spec, device, port=DEFAULT_PORT if args.port is None else args.port, host=args.host, dtype=args.dtype,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        cpu_kvcache_gib=args.kv_cache_gib, max_num_seqs=args.max_num_seqs, enforce_eager=args.enforce_eager,
        tensor_parallel_size=args.tensor_parallel_size, pipeline_parallel_size=args.pipeline_parallel_size,
        data_parallel_size=args.data_parallel_size, gpus=_gpu_list(args.gpus),
        extra_args=parse_extra_args(args.extra or ""))
    cfg.validate(model_max_len=spec.max_len)
    return cfg, spec


def _gpu_list(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(g) for g in text.split(",") if g.strip())
    except ValueError:
        raise ConfigError(f"--gpus {text!r} is not a list of GPU numbers: write them like 0,1.") from None


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise ConfigError(f"Port {port} is not a valid port: pick a number between 1024 and 65535.")


def _check_writable(path: str) -> None:
    """Refuse an output file that cannot be written, before any work is done."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{path} is a folder: give a file name in it, e.g. {p / 'runs.json'}.")
    if not p.parent.is_dir():
        raise ConfigError(f"The folder {p.parent} does not exist: create it first, or write to a folder that does.")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(f"{path} cannot be written (permission denied): pick a folder you may write to.")


def _write(path: str, text: str, after: str = "") -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise LabError(f"Could not write {path} ({e.strerror or e}){after}: pick a folder that exists and that "
                       "you may write to.") from e
    _print(f"wrote {path}")


def _cmd_serve(args) -> int:
    from engine.serving.server import VLLMServer

    cfg, spec = _config(args)
    srv = VLLMServer(port=cfg.port)
    if srv.snapshot().state != "stopped":
        raise LabError(f"A server this app started is already running on port {cfg.port}: "
                       f"`python -m engine stop --port {cfg.port}` first.")
    srv.start_and_wait(cfg, model_max_len=spec.max_len, log=_print)
    if args.detach:
        _print(f"left running (pid {srv.snapshot().pid}); stop it with: python -m engine stop --port {cfg.port}")
        return 0
    _print("serving; press Ctrl+C to stop")
    try:
        while srv.snapshot().state == "ready":
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    if srv.snapshot().state == "failed":  # it died: its tree was already stopped; say how
        raise LabError(srv.snapshot().error)
    srv.stop()
    _print("stopped")
    return 0


def _cmd_status(args) -> int:
    from engine.serving.leftovers import leftovers
    from engine.serving.server import VLLMServer

    s = VLLMServer(port=args.port).snapshot()  # adopts our server, or stops a dead one's leftovers
    if s.notice:
        print(s.notice, file=sys.stderr)
    _print(json.dumps({"state": s.state, "pid": s.pid, "stage": s.stage, "command": s.command,
                       "leftovers": [p.pid for p in leftovers()]}, indent=2))
    return 0


def _cmd_stop(args) -> int:
    from engine.serving.leftovers import clear_leftovers
    from engine.serving.server import VLLMServer

    srv = VLLMServer(port=args.port)
    if notice := srv.snapshot().notice:
        _print(notice)
    if srv.snapshot().pid is not None:
        srv.stop()
        _print("stopped")
    elif not notice:
        _print(f"no server of this app on port {args.port}")
    if cleared := clear_leftovers():  # an earlier server's processes on any port of this app
        _print(cleared)
    return 0


# -- scenarios --------------------------------------------------------------------------------
def _cmd_list(args) -> int:
    from engine.measure.scenarios import SCENARIOS

    for s in SCENARIOS.values():
        _print(f"{s.name:24} {s.description}")
    return 0


def _cmd_run(args) -> int:
    """A scenario through engine.runs, the path the app's jobs take, in the foreground: against --url,
    or a server started here (every option checked before it starts) and stopped at the end."""
    from engine.measure import kvcache, scenarios
    from engine.measure.progress import Console
    from engine.results.store import RunStore
    from engine.runs import Runner, Target, check_tuning

    scn = scenarios.get(args.scenario)
    levels = _check_run_options(scn, args)
    slo = _slo(args)
    if args.json:
        _check_writable(args.json)
    store = RunStore()
    # The key as `vllm bench serve` takes it: from the environment, never a flag (a flag shows in `ps`).
    target = Target.at(args.url, args.model_name, os.environ.get("OPENAI_API_KEY")) if args.url else None
    cfg, spec = (None, None) if args.url else _config(args)
    load = scn.load_spec(num_requests=8 if scn.kind == "sweep" else None, max_tokens=args.max_tokens)
    versus = None
    if args.versus:  # the second server's key from the variable named, as the first's from OPENAI_API_KEY
        versus = Target.at(args.versus, None, os.environ.get(args.versus_api_key_env) if args.versus_api_key_env
                           else None)
        if versus.same_server(target):
            raise ConfigError(f"--versus {args.versus} is the --url server itself: give a second server's address.")
    for t in (target, versus):
        if t is not None:
            t.aim(load)  # what the running server accepts, before a request is sent
    def save(run):
        store.save(run)
        return run

    from engine.measure.warmth import WarmthLedger, recall_from

    # a server at --url may have run these batch sizes before: the history says (cold or warm runs)
    warmth = WarmthLedger(lambda instance: recall_from((r.extra for r in store.list(kind="vllm")), instance))
    runner = Runner(save, progress=Console(), slo=slo, warmth=warmth)

    if scn.kind == "naive":
        if args.max_tokens is not None:
            check_max_tokens(args.max_tokens, spec.max_len, of="this model's context length", fix="")
        results = [runner.naive(scn.naive_spec(spec.path, random_weights=spec.placeholder_text,
                                               max_new_tokens=args.max_tokens))]
    elif versus is not None:
        results = runner.side_by_side(target, versus, load)
        if target.on_this_machine and versus.on_this_machine:
            from engine.observe import hardware, nvml
            from engine.runs import sharing_said

            if why := sharing_said(hardware.default_device(), len(nvml.devices())):
                _print(f"note: both servers run on this machine. {why}")
    elif target is not None:
        results = runner.sweep(load, levels, target) if scn.kind == "sweep" else [runner.load(load, target)]
    else:
        from engine.observe import hardware
        from engine.serving.server import VLLMServer

        hardware.describe()  # the CPU's memory bandwidth is measured once: before the server competes for it
        configs = scenarios.configs_for(scn, cfg) if scn.kind == "tuning" else [cfg]
        if scn.kind == "tuning":
            check_tuning(configs, load, model_max_len=spec.max_len)
        else:
            check_max_tokens(load.max_tokens, cfg.max_model_len or spec.max_len,
                             of="the max-model-len the server starts with", fix=", or give a longer --max-model-len")
        srv = VLLMServer(port=cfg.port)
        done = False
        try:
            if scn.kind == "tuning":
                results = runner.tuning(srv, configs, load, model_max_len=spec.max_len,
                                        labels=list(scn.config_labels) or None)
            else:
                srv.start_and_wait(cfg, model_max_len=spec.max_len, log=_print)
                target = Target.of(srv)
                results = runner.sweep(load, levels, target) if scn.kind == "sweep" else [runner.load(load, target)]
            done = True
        finally:
            if not (done and args.detach):  # a failed run never leaves a server behind
                srv.stop()
        if args.detach:  # as `serve --detach`: its record lets the app (or `stop`) take it over
            _print(f"left running (pid {srv.snapshot().pid}) with the last settings; the app adopts it, or stop it "
                   f"with: python -m engine stop --port {cfg.port}")
    for r in results:
        _print(summary_table(r, args.price_per_gpu_hour))
        if scn.name == "kv-squeeze" and (sentence := kvcache.said(r)):
            _print(f"  {sentence}")
        _print(f"saved as run {r.id} (python -m engine report {r.id} -o report.html)")
    if scn.name == "prefix-cache":
        from engine.measure import prefix

        if both := prefix.pair(results):
            _print(prefix.sentence(*both))
    if slo is not None and scn.kind == "sweep":
        from engine.measure import slo as slos

        _print(slos.knee_said(slos.levels(results, slo), slo))
    if args.json:
        _write(args.json, store.export_json([r.id for r in results]),
               after="; the runs are saved in the history (python -m engine export --out FILE)")
    return 0


def _slo(args):
    """The SLO --slo-ttft-ms / --slo-tpot-ms give (vllm bench serve's --goodput ttft:X tpot:Y), checked;
    None when neither is given."""
    from engine.measure.slo import Slo

    if args.slo_ttft_ms is None and args.slo_tpot_ms is None:
        return None
    return Slo(ttft_ms=args.slo_ttft_ms, tpot_ms=args.slo_tpot_ms)


_HOW = {"sequential": "sends its requests one after another", "burst": "sends all its requests at once",
        "poisson": "sends its requests at random times at a set rate"}


def _check_run_options(scn, args) -> list[int] | None:
    """Refuse, with one sentence, an option out of bounds or one the scenario would ignore (before any
    server starts or request is sent); return the sweep's levels (None for other scenarios)."""
    from engine.measure.scenarios import sweep_levels
    from engine.measure.spec import check_in_flight, parse_levels
    from engine.runs import check_url

    if args.versus is not None or args.versus_api_key_env is not None:
        if args.url is None or args.versus is None:
            raise ConfigError("--versus compares two running servers: give both --url A and --versus B.")
        if scn.kind != "vllm":
            raise ConfigError(f"--versus sends one load test to two servers at once, and {scn.name} is not one: pick "
                              "a load scenario (python -m engine list).")
        check_url(args.versus)
        if args.versus_api_key_env and os.environ.get(args.versus_api_key_env) is None:
            raise ConfigError(f"--versus-api-key-env names {args.versus_api_key_env}, which is not set: export it "
                              "first.")
    if args.url is not None:
        if scn.kind == "naive":
            raise ConfigError("The naive scenario runs transformers itself, with no server: leave --url out.")
        if scn.kind == "tuning":
            raise ConfigError("The tuning scenario restarts the server with each setting: leave --url out.")
        check_url(args.url)
        if args.detach:
            raise ConfigError("--detach leaves running a server this command starts, and with --url it starts none: "
                              "leave --detach out.")
        if given := _given(args):  # the server is already running: its own settings hold
            raise ConfigError(f"{_flag(given[0])} sets up a server the app starts, but --url points at one already "
                              f"running, which keeps its own settings: leave {_flag(given[0])} out, or leave --url "
                              "out to start a server.")
    elif args.model_name:
        raise ConfigError("--model-name names the model of the server at --url: leave it out, the app names the "
                          "model of a server it starts.")
    if args.detach and scn.kind == "naive":
        raise ConfigError("The naive scenario starts no server to leave running: leave --detach out.")
    # the options a comparison sets itself (a squeezed KV cache is --kv-cache-gib on the command line)
    sets = {{"cpu_kvcache_gib": "kv_cache_gib", "kv_cache_requests": "kv_cache_gib"}.get(k, k)
            for c in scn.configs for k in c}
    if scn.kind == "tuning" and (given := _given(args, tuple(sorted(sets)))):
        raise ConfigError(f"The tuning scenario sets {_flag(given[0])} itself for each configuration it compares: "
                          f"leave {_flag(given[0])} out.")
    if args.max_tokens is not None:
        check_max_tokens(args.max_tokens)
    price = args.price_per_gpu_hour
    if price is not None and not (math.isfinite(price) and price >= 0):
        raise ConfigError(f"--price-per-gpu-hour must be a price of zero or more, not {price:g}.")
    if scn.kind != "sweep":
        how = "runs transformers itself, with no server" if scn.kind == "naive" else _HOW.get(scn.shape, "")
        for flag, value in (("--concurrency", args.concurrency), ("--levels", args.levels)):
            if value is not None:
                raise ConfigError(f"The {scn.name} scenario {how}, so {flag} does not apply: leave it out, or "
                                  "run the sweep scenario to choose the requests in flight.")
        return None
    if args.concurrency is not None and args.levels is not None:
        raise ConfigError("--levels and --concurrency both choose the sweep's levels: give only one of them.")
    if args.levels is not None:
        return parse_levels(args.levels)
    if args.concurrency is not None:
        check_in_flight(args.concurrency, "The sweep's top level (requests in flight)")
    return sweep_levels(scn, args.concurrency)


def summary_table(r, price_per_gpu_hour: float | None = None) -> str:
    """A finished run, as the CLI prints it; with a price per GPU-hour, what a million output tokens cost."""
    from engine.measure import ceiling, stats, warmth
    from engine.measure.slo import Slo, judge

    s = r.summary
    check = stats.token_check(r.extra)  # the server's count of the output tokens against the client's
    limit = ceiling.run_ceiling(r)  # its decode speed against what the memory bandwidth allows

    def ms(key: str) -> str:
        v = s.get(key)
        return "–" if v is None else f"{v:,.0f} ms"

    lines = [
        f"== {r.label or r.scenario} [{r.kind}] ==",
        f"requests ok / failed   {s.get('completed', 0)} / {s.get('failed', 0)}",
        *(f"  {sentence}" for _, sentence in stats.failure_causes(r.records)),
        f"wall time              {r.duration:.2f} s",
        f"output tokens          {s.get('total_output_tokens', 0)}",
        *(f"  {sentence}" for sentence in (check.sentences if check else ())),
        f"output throughput      {s.get('output_throughput') or 0:,.1f} tok/s",
        f"TTFT mean / p99        {ms('mean_ttft_ms')} / {ms('p99_ttft_ms')}",
        f"TPOT mean              {ms('mean_tpot_ms')}",
        *((f"  {limit.sentence}",) if limit else ()),
        f"E2E latency mean / p99 {ms('mean_e2el_ms')} / {ms('p99_e2el_ms')}",
    ]
    n = r.extra
    if n.preemptions is not None or n.peak_waiting is not None:  # engine.measure.kvcache.KvWatch
        cap = f"{n.kv_cache_tokens:,} tokens, " if n.kv_cache_tokens else ""
        peak = f"{n.peak_kv_usage:.0%}" if n.peak_kv_usage is not None else "–"
        lines.append(f"KV cache               {cap}peak {peak} used, {n.preemptions if n.preemptions is not None else '–'}"
                     f" preempted, up to {n.peak_waiting if n.peak_waiting is not None else '–'} waiting")
    if (cost := stats.cost_per_million_output_tokens(price_per_gpu_hour, r.duration,
                                                     s.get("total_output_tokens"))) is not None:
        lines.append(f"cost / M output tokens {cost:,.4f} at {price_per_gpu_hour:g} per GPU-hour (measured wall time)")
    if warm := stats.warmup_cost(r.records):
        lines.append(f"  {warm.said}")
    if cold := warmth.said(r.extra):
        lines.append(f"  {cold}")
    slo = Slo.from_config(r.extra.slo_ms)  # asked for with --slo-ttft-ms / --slo-tpot-ms
    if slo is not None and (verdict := judge(r, slo)) is not None:
        lines += [f"goodput                {verdict.goodput:,.2f} req/s", f"  {verdict.said}"]
    return "\n".join(lines)


# -- history ----------------------------------------------------------------------------------
def _cmd_cluster(args) -> int:
    """Print what to run on each machine of a Ray cluster to serve one model across them."""
    from engine.serving import models
    from engine.serving.cluster import ray_commands
    from engine.serving.config import ServerConfig, parse_extra_args

    spec = models.resolve(args.model or "embedded")
    cfg = ServerConfig.for_model(spec, "cuda", max_model_len=args.max_model_len, dtype=args.dtype,
                                 gpu_memory_utilization=args.gpu_memory_utilization,
                                 extra_args=parse_extra_args(args.extra or ""))
    for step, node in enumerate(ray_commands(cfg, args.head, args.nodes, args.gpus_per_node, args.serve_port), 1):
        _print(f"# {step}. on {node.where}\n{node.command}\n")
    _print(f"Then attach to http://{args.head}:{args.serve_port} (Server page: Connect to an existing server, or "
           f"`python -m engine run SCENARIO --url http://{args.head}:{args.serve_port}`).")
    return 0


def _cmd_export(args) -> int:
    from engine.results.store import RunStore

    if args.out:
        _check_writable(args.out)
    store = RunStore()
    ids = args.ids or None
    for run_id in ids or ():
        if run_id not in store:
            raise LabError(f"No run '{run_id}' in the history; it may have been deleted: leave the ids out to export "
                           "every run.")
    text = store.export_csv(ids) if args.format == "csv" else store.export_json(ids)
    if args.out:
        _write(args.out, text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_report(args) -> int:
    """The runs as one HTML file that opens anywhere with no network (what History's download writes)."""
    from engine.figures.report import build_report
    from engine.results.store import RunStore

    _check_writable(args.out)
    store = RunStore()
    runs = [store.load(run_id) for run_id in args.ids]  # an unknown or damaged one: its sentence, nothing written
    _write(args.out, build_report(runs, "en"))
    return 0


def _cmd_import(args) -> int:
    from engine.results.store import RunStore

    store = RunStore()
    for path in args.files:
        ids = store.import_file(path)
        _print(f"{path}: {len(ids)} run(s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="Serving Lab, headless.")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("model", help="prepare the offline models")
    msub = m.add_subparsers(dest="model_command", required=True)
    prep = msub.add_parser("prepare", help="fetch and convert the embedded default model (idempotent)")
    prep.add_argument("--shape-only", action="store_true", help="also build the shape-only Llama 3 8B folder")
    prep.set_defaults(func=_cmd_model_prepare)

    s = sub.add_parser("serve", help="start a vLLM server and show its startup stages")
    _server_args(s)
    s.add_argument("--detach", action="store_true", help="leave it running and return")
    s.set_defaults(func=_cmd_serve)
    for name, fn in (("status", _cmd_status), ("stop", _cmd_stop)):
        c = sub.add_parser(name, help=f"{name} of the server this app started")
        c.add_argument("--port", type=int, default=DEFAULT_PORT)
        c.set_defaults(func=fn)

    sub.add_parser("list", help="list the scenarios").set_defaults(func=_cmd_list)
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
    r.add_argument("--concurrency", type=int)
    r.add_argument("--levels", help="sweep levels, e.g. 1,2,4,8")
    r.add_argument("--json", help="also write the runs as JSON here")
    r.add_argument("--price-per-gpu-hour", type=float, metavar="PRICE",
                   help="print what a million output tokens cost at this price per GPU-hour (the whole machine, "
                        "over the measured wall time)")
    r.add_argument("--slo-ttft-ms", type=float, metavar="MS",
                   help="judge each run by this TTFT limit and report its goodput (vllm bench serve --goodput ttft:MS)")
    r.add_argument("--slo-tpot-ms", type=float, metavar="MS",
                   help="judge each run by this TPOT limit and report its goodput (--goodput tpot:MS)")
    _server_args(r)
    r.set_defaults(func=_cmd_run)

    c = sub.add_parser("cluster", help="print the commands that serve one model from several machines (Ray)")
    c.add_argument("--head", required=True, help="the head machine's address, as the others reach it")
    c.add_argument("--nodes", type=int, required=True, help="machines in all, the head included")
    c.add_argument("--gpus-per-node", type=int, required=True)
    c.add_argument("--serve-port", type=int, default=8000, help="where the API server listens on the head")
    for option in ("--model", "--dtype", "--extra"):
        c.add_argument(option)
    c.add_argument("--max-model-len", type=int)
    c.add_argument("--gpu-memory-utilization", type=float)
    c.set_defaults(func=_cmd_cluster)

    e = sub.add_parser("export", help="export saved runs (all, or the ids given)")
    e.add_argument("ids", nargs="*")
    e.add_argument("--format", choices=["json", "csv"], default="json")
    e.add_argument("--out")
    e.set_defaults(func=_cmd_export)
    rep = sub.add_parser("report", help="write saved runs as one self-contained HTML report (to mail)")
    rep.add_argument("ids", nargs="+", metavar="RUN_ID")
    rep.add_argument("-o", "--out", default="serving-lab-report.html", help="default: serving-lab-report.html")
    rep.set_defaults(func=_cmd_report)
    i = sub.add_parser("import", help="import runs exported elsewhere (e.g. from a GPU box)")
    i.add_argument("files", nargs="+")
    i.set_defaults(func=_cmd_import)
    return p


def main(argv: list[str] | None = None) -> int:
    """Every command: a user-caused error is one sentence on stderr ("error: ..."), exit 2."""
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "port", None) is not None:
            _check_port(args.port)
        return args.func(args)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
    except OSError as e:  # a file or folder named on the command line, or the history's own folder
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}: check the path and that you may read and write there.",
              file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 2
