"""`model prepare`, `serve`, `status`, `stop`, and the server options `serve` and `run` share (checked
before anything starts)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from engine.cli.output import say_line
from engine import settings
from engine.errors import ConfigError, LabError
from engine.messages import say
from engine.settings import Settings

# The options that set up a server the app starts. None (or False) = not given: the lab's default, and
# `run --url` can tell the options it would ignore.
SERVER_OPTIONS = ("model", "port", "host", "dtype", "max_model_len", "gpu_memory_utilization", "kv_cache_gib",
                  "max_num_seqs", "enforce_eager", "tensor_parallel_size", "pipeline_parallel_size",
                  "data_parallel_size", "gpus", "enable_prefix_caching", "extra")
TWO_WAY = ("enable_prefix_caching",)  # --x / --no-x: False is given too (None: not given)
GPU_OPTIONS = ("gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpus")


PORT_HELP = f"default $SERVING_LAB_VLLM_PORT, else {settings.DEFAULT_PORT}"


def port_of(args) -> int:
    """The port given, else the one the command's settings (the environment) set for the app's own server."""
    return args.settings.vllm_port if args.port is None else args.port


def register(sub) -> None:
    m = sub.add_parser("model", help="prepare the offline models")
    msub = m.add_subparsers(dest="model_command", required=True)
    prep = msub.add_parser("prepare", help="fetch and convert the embedded default model (idempotent)")
    prep.add_argument("--shape-only", action="store_true", help="also build the shape-only Llama 3 8B folder")
    prep.set_defaults(func=_model_prepare)

    s = sub.add_parser("serve", help="start a vLLM server and show its startup stages")
    add_server_options(s)
    s.add_argument("--detach", action="store_true", help="leave it running and return")
    s.set_defaults(func=_serve)
    for name, fn in (("status", _status), ("stop", _stop)):
        c = sub.add_parser(name, help=f"{name} of the server this app started")
        c.add_argument("--port", type=int, help=PORT_HELP)
        c.set_defaults(func=fn)


def add_server_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="embedded (default) | shape-only | a folder | hub:owner/name")
    p.add_argument("--port", type=int, help=PORT_HELP)
    p.add_argument("--host", help="default 127.0.0.1")
    p.add_argument("--dtype")
    p.add_argument("--max-model-len", type=int, help="default: 2048, or less when the model's limit is lower")
    p.add_argument("--gpu-memory-utilization", type=float, help="GPU only: the fraction vLLM may take (default 0.85)")
    p.add_argument("--kv-cache-gib", type=float,
                   help="CPU only: the KV cache in GiB (default 2; a fraction such as 0.01 squeezes it)")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--tensor-parallel-size", type=int, help="GPU only: GPUs to split the model over (default 1)")
    p.add_argument("--pipeline-parallel-size", type=int,
                   help="GPU only: split the model by groups of layers over this many GPUs (default 1)")
    p.add_argument("--data-parallel-size", type=int,
                   help="GPU only: whole copies of the model, each serving a share of the requests (default 1)")
    p.add_argument("--gpus", help="GPU only: which GPUs, e.g. 0,1 (CUDA_VISIBLE_DEVICES; default all)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   help="vLLM's prefix caching (on by default in vLLM): --no-enable-prefix-caching turns it off, so no "
                        "request's prefill is taken from an earlier one's cached prompt")
    p.add_argument("--extra", help='other vLLM flags, quoted: --extra "--seed 0" (or --extra="--seed 0")')


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def given(args, options=SERVER_OPTIONS) -> list[str]:
    return [o for o in options if getattr(args, o, None) not in (None, False)
            or o in TWO_WAY and getattr(args, o, None) is False]


def config(args):
    """The server settings and model the command line asks for (the lab's defaults elsewhere), checked
    before anything starts: an option this machine's device would ignore is refused."""
    from engine.observe import hardware
    from engine.serving import prepare
    from engine.serving.config import ServerConfig, parse_extra_args

    device = hardware.default_device()
    if device == "cpu":
        for option in GPU_OPTIONS:
            if getattr(args, option) is not None:
                raise ConfigError(say("{flag} applies to a GPU, and vLLM runs on this machine's CPU: leave it out "
                                      "(size the CPU's KV cache with --kv-cache-gib).", flag=flag(option)))
    elif args.kv_cache_gib is not None:
        raise ConfigError(say("--kv-cache-gib sizes the CPU build's KV cache, and vLLM runs on a GPU here: set "
                              "--gpu-memory-utilization instead."))
    spec = prepare.resolve(args.model or "embedded", args.settings.models)
    cfg = ServerConfig.for_model(
        spec, device, port=port_of(args), host=args.host, dtype=args.dtype,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        cpu_kvcache_gib=args.kv_cache_gib, max_num_seqs=args.max_num_seqs, enforce_eager=args.enforce_eager,
        tensor_parallel_size=args.tensor_parallel_size, pipeline_parallel_size=args.pipeline_parallel_size,
        data_parallel_size=args.data_parallel_size, gpus=_gpu_list(args.gpus),
        enable_prefix_caching=args.enable_prefix_caching, extra_args=parse_extra_args(args.extra or ""))
    cfg.validate(model_max_len=spec.max_len)
    return cfg, spec


def _gpu_list(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(g) for g in text.split(",") if g.strip())
    except ValueError:
        raise ConfigError(say("--gpus '{gpus}' is not a list of GPU numbers: write them like 0,1.",
                              gpus=text)) from None


def own_server(port: int, settings: Settings):
    """A server this command starts on `port`; one found running there (and followed) is refused with
    whose it is: never a second one, and never stopped by this command."""
    from engine.serving.port_record import holder_said
    from engine.serving.server import VLLMServer

    srv = VLLMServer(port=port, starter="cli", settings=settings)
    if (rec := srv.record()) is not None:
        raise LabError(holder_said(rec, port))
    return srv


def _model_prepare(args) -> int:
    from engine.serving import prepare

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    path = prepare.prepare_embedded(args.settings.models, log=lambda m: say_line(f"  {m}"))
    say_line(f"embedded model ready: {path}")
    if args.shape_only:
        say_line(f"shape-only Llama 3 8B ready: {prepare.prepare_shape_only(args.settings.models)}")
    return 0


def _serve(args) -> int:
    cfg, spec = config(args)
    srv = own_server(cfg.port, args.settings)
    srv.start_and_wait(cfg, model_max_len=spec.max_len, log=say_line)
    if args.detach:
        say_line(f"left running (pid {srv.snapshot().pid}); stop it with: python -m engine stop --port {cfg.port}")
        return 0
    say_line("serving; press Ctrl+C to stop")
    try:
        while srv.snapshot().state == "ready":
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    if srv.snapshot().state == "failed":  # it died: its tree was already stopped; say how
        raise LabError(srv.snapshot().error)
    srv.stop()
    say_line("stopped")
    return 0


def _status(args) -> int:
    from engine.serving.leftovers import leftovers
    from engine.serving.server import VLLMServer

    # Only reports: it follows a live server and stops nothing (a leftover is stopped by `stop`).
    srv = VLLMServer(port=port_of(args), starter="cli", clean=False, settings=args.settings)
    s, left = srv.snapshot(), leftovers(srv.runtime)
    say_line(json.dumps({"state": s.state, "pid": s.pid, "stage": s.stage, "command": s.command,
                         "started_by": s.started_by, "leftovers": [p.pid for p in left]}, indent=2))
    if left:
        print(f"{len(left)} leftover process(es) of an earlier server; not stopped: `python -m engine stop` stops "
              "them.", file=sys.stderr)
    return 0


def _stop(args) -> int:
    from engine.serving.leftovers import clear_leftovers
    from engine.serving.port_record import starter_said
    from engine.serving.server import VLLMServer

    port = port_of(args)
    srv = VLLMServer(port=port, starter="cli", settings=args.settings)
    if notice := srv.snapshot().notice:
        say_line(notice)
    if (pid := srv.snapshot().pid) is not None:
        rec = srv.record() or {}
        srv.stop()
        say_line(f"stopped the vLLM server on port {port} (API server pid {pid}, started by "
                 f"{starter_said(rec.get('starter'))}) and every process it started")
    elif not notice:
        say_line(f"no server of this app on port {port}")
    if cleared := clear_leftovers(srv.runtime):  # an earlier server's processes on any port of this app
        say_line(cleared)
    return 0
