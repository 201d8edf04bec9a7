"""Runs: the one orchestration path. `Lab` runs a `Runner` inside a background job (adding who may act and the
chat marks); the CLI and the bench scripts run one in the foreground with a `Console` (docs/architecture.md)."""
from engine.runs.counts import ServerCount
from engine.runs.runner import (Runner, already_running, check_repeats, check_search, check_sweep, check_tuning,
                               side_label, tuning_label)
from engine.runs.search import SloSearch
from engine.runs.target import Target, check_url

__all__ = ["Runner", "ServerCount", "SloSearch", "Target", "already_running", "check_repeats",
           "check_search", "check_sweep", "check_tuning", "check_url", "side_label", "tuning_label"]
