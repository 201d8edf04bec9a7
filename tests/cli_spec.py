"""What `python -m engine run ARGV` would send, built as the command builds it (engine/cli/run.py), for tests that
check the CLI's workload options without starting a server."""
from __future__ import annotations

from engine.cli import parse
from engine.cli.run import _load
from engine.cli.run_options import check_run_options
from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import scenarios


def load_of(*argv: str) -> LoadSpec:
    """The LoadSpec `python -m engine run ARGV` would send (a ConfigError or WorkloadError as the command's)."""
    args = parse(["run", *argv])
    scn = scenarios.get(args.scenario)
    check_run_options(scn, args)
    return _load(scn, args)
