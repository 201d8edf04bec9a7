"""`python -m engine ...`: the same engine as the dashboard, headless — for GPU boxes, scripts and CI.

  python -m engine model prepare [--shape-only]
  python -m engine serve  [--model embedded|shape-only|PATH|hub:ID] [--max-model-len N] ... [--detach]
  python -m engine status | stop [--port P]
  python -m engine run SCENARIO [--url URL | --model ...] [--json OUT]   (scenarios: python -m engine list)
  python -m engine export [--format json|csv] [--out FILE] [RUN_ID ...]
  python -m engine import FILE ...
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .errors import LabError


def _print(msg: str) -> None:
    print(msg, flush=True)


# -- models -----------------------------------------------------------------------------------
def _cmd_model_prepare(args) -> int:
    from . import models

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    path = models.prepare_embedded(log=lambda m: _print(f"  {m}"))
    _print(f"embedded model ready: {path}")
    if args.shape_only:
        _print(f"shape-only Llama 3 8B ready: {models.prepare_shape_only()}")
    return 0


# -- server -----------------------------------------------------------------------------------
def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="embedded", help="embedded | shape-only | a folder | hub:owner/name")
    p.add_argument("--port", type=int, default=int(os.environ.get("SERVING_LAB_VLLM_PORT", "9000")))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--dtype", default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--kv-cache-gib", type=int, default=2, help="CPU only: VLLM_CPU_KVCACHE_SPACE (whole GiB)")
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--extra", default="", help='other vLLM flags, quoted: --extra "--seed 0"')


def _config(args):
    """The server settings and model the command line asks for (the lab's defaults elsewhere)."""
    from . import hardware, models
    from .config import ServerConfig, parse_extra_args

    spec = models.resolve(args.model)
    cfg = ServerConfig.for_model(
        spec, hardware.default_device(), port=args.port, host=args.host, dtype=args.dtype,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        cpu_kvcache_gib=args.kv_cache_gib, max_num_seqs=args.max_num_seqs, enforce_eager=args.enforce_eager,
        tensor_parallel_size=args.tensor_parallel_size, extra_args=parse_extra_args(args.extra))
    return cfg, spec


def _cmd_serve(args) -> int:
    from .server import VLLMServer

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
    srv.stop()
    _print("stopped")
    return 0


def _cmd_status(args) -> int:
    from .server import VLLMServer

    s = VLLMServer(port=args.port).snapshot()
    _print(json.dumps({"state": s.state, "pid": s.pid, "stage": s.stage, "command": s.command}, indent=2))
    return 0


def _cmd_stop(args) -> int:
    from .server import VLLMServer

    srv = VLLMServer(port=args.port)
    if srv.snapshot().pid is None:
        _print(f"no server of this app on port {args.port}")
        return 0
    srv.stop()
    _print("stopped")
    return 0


# -- scenarios --------------------------------------------------------------------------------
def _cmd_list(args) -> int:
    from .scenarios import SCENARIOS

    for s in SCENARIOS.values():
        _print(f"{s.name:24} {s.description}")
    return 0


def _cmd_run(args) -> int:
    from . import scenarios
    from .store import RunStore

    store = RunStore()
    needs_model = not args.url or scenarios.get(args.scenario).kind == "naive"
    cfg, spec = _config(args) if needs_model else (None, None)
    results = scenarios.run_headless(
        args.scenario, store, url=args.url, model_name=args.model_name, config=cfg, spec=spec,
        max_tokens=args.max_tokens, concurrency=args.concurrency, levels=args.levels, log=_print,
    )
    for r in results:
        _print(scenarios.summary_table(r))
    if args.json:
        with open(args.json, "w") as f:
            f.write(store.export_json([r.id for r in results]))
        _print(f"wrote {args.json}")
    return 0


# -- history ----------------------------------------------------------------------------------
def _cmd_export(args) -> int:
    from .store import RunStore

    store = RunStore()
    ids = args.ids or None
    text = store.export_csv(ids) if args.format == "csv" else store.export_json(ids)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        _print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_import(args) -> int:
    from .store import RunStore

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
        c.add_argument("--port", type=int, default=int(os.environ.get("SERVING_LAB_VLLM_PORT", "9000")))
        c.set_defaults(func=fn)

    sub.add_parser("list", help="list the scenarios").set_defaults(func=_cmd_list)
    r = sub.add_parser("run", help="run a scenario headless and save it to the history")
    r.add_argument("scenario")
    r.add_argument("--url", help="an already running server (else one is started with the options below)")
    r.add_argument("--model-name", help="served model name at --url (default: asked from /v1/models)")
    r.add_argument("--max-tokens", type=int)
    r.add_argument("--concurrency", type=int)
    r.add_argument("--levels", help="sweep levels, e.g. 1,2,4,8")
    r.add_argument("--json", help="also write the runs as JSON here")
    _server_args(r)
    r.set_defaults(func=_cmd_run)

    e = sub.add_parser("export", help="export saved runs (all, or the ids given)")
    e.add_argument("ids", nargs="*")
    e.add_argument("--format", choices=["json", "csv"], default="json")
    e.add_argument("--out")
    e.set_defaults(func=_cmd_export)
    i = sub.add_parser("import", help="import runs exported elsewhere (e.g. from a GPU box)")
    i.add_argument("files", nargs="+")
    i.set_defaults(func=_cmd_import)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
