"""`python -m engine ...`: prepare models, serve, run scenarios and sweeps, naive baseline, export."""
from __future__ import annotations

import argparse
import sys

from .errors import LabError


def _cmd_model_prepare(args) -> int:
    from . import models

    path = models.prepare_embedded(log=lambda m: print(f"  {m}", flush=True))
    print(f"embedded model ready: {path}")
    if args.shape_only:
        print(f"shape-only Llama 3 8B ready: {models.prepare_shape_only()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="Serving Lab, headless.")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("model", help="prepare the offline models")
    msub = m.add_subparsers(dest="model_command", required=True)
    prep = msub.add_parser("prepare", help="fetch and convert the embedded default model (idempotent)")
    prep.add_argument("--shape-only", action="store_true", help="also build the shape-only Llama 3 8B folder")
    prep.set_defaults(func=_cmd_model_prepare)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
