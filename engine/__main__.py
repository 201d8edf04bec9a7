"""Headless CLI over the engine: `python -m engine --help`."""
from .cli import main

raise SystemExit(main())
