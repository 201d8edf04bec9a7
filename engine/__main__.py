"""Headless CLI over the engine: `python -m engine --help`."""
from engine.cli import command

raise SystemExit(command())
