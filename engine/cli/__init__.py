"""`python -m engine ...`: the headless commands; here the parser and main's one sentence per user error.
See docs/internals.md#cli.

Each command module imports at its top only what the parser needs, and the engine inside the command that uses it:
`--help` and a mistyped flag answer at once, not after the ~4 s that aiohttp, openai, numpy, plotly and the Lab
take to import (tests/test_layering.py allows function-level imports of engine modules here, and elsewhere only
with a comment saying why)."""
from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import sys
from pathlib import Path

from engine.cli import app, cluster, compare, guide, history, run, server
from engine import settings
from engine.errors import LabError
from engine.messages import mark, say, translate


def build_parser() -> argparse.ArgumentParser:
    installed = Path(sys.argv[0]).name == "serving-lab"  # the console command pipx install . puts on the PATH
    p = argparse.ArgumentParser(prog="serving-lab" if installed else "python -m engine",
                                description="Serving Lab: the dashboard (app) and the headless commands.")
    sub = p.add_subparsers(dest="command", required=True)
    for commands in (server, run, compare, cluster, history, guide, app):  # in this order in --help
        commands.register(sub)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line's arguments, and the one Settings of this command (`args.settings`): the environment read
    here, once; what the command builds (its Lab, server, history) is handed them. A bad variable: ConfigError."""
    args = build_parser().parse_args(_joined_extra(argv))
    args.settings = settings.from_env()
    return args


def _joined_extra(argv: list[str]) -> list[str]:
    """`--extra "--seed=0"` or `--extra --enforce-eager` as `--extra=...`: argparse would take a value that
    looks like a flag for an option of its own and stop with 'expected one argument'."""
    out = []
    it = iter(argv)
    for a in it:
        if a == "--extra":
            value = next(it, None)
            out.append(a if value is None else f"--extra={value}")
        else:
            out.append(a)
    return out


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit finds no closed pipe to complain of
    (Python's own advice, docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def command() -> int:
    """`python -m engine` and the `serving-lab` command: main(), and once it ended well the process ends as soon as
    Python's own end has joined its threads (the client processes joined before), run every other atexit handler
    and flushed stdout and stderr, without freeing every module and object one by one first: that teardown took
    0.2-0.4 s after the run's "done" line on a 2-core machine (bench/results/done-exit-cpu-3.md), and the operating
    system takes the memory back at once. A command that failed tears down as usual, so a file a failed run left
    open is still flushed."""
    ended: dict[str, int] = {}
    atexit.register(_exit_now, ended)  # registered before anything the command registers: it runs last
    code = main()
    if code == 0:
        ended["code"] = code
    return code


def _exit_now(ended: dict[str, int]) -> None:
    if "code" not in ended:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone away, a stream already closed
            stream.flush()
    os._exit(ended["code"])


def main(argv: list[str] | None = None) -> int:
    """Every command: a user-caused error is one sentence on stderr ("error: ..."), exit 2; a reader that went
    away (`| head`) ends it quietly, as Unix tools end (exit 141, 128 + SIGPIPE)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        _quiet_stdout()
        return 128 + signal.SIGPIPE


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(_joined_extra(argv))  # argparse's own errors end it here, in its words
    lang = getattr(args, "lang", "en")  # a command that speaks Korean (--lang ko) says its errors in Korean too
    try:
        args = parse(argv)
        if getattr(args, "port", None) is not None:
            from engine.serving.config import check_port

            check_port(args.port)
        return args.func(args)
    except LabError as e:
        print(f"error: {translate(e, lang)}", file=sys.stderr)
    except BrokenPipeError:  # not a path's fault: main ends quietly
        raise
    except OSError as e:  # a file or folder named on the command line, or the history's own folder
        why = e.strerror or str(e)
        said = (say("{path}: {why}: check the path and that you may read and write there.", path=str(e.filename),
                    why=why) if e.filename else say("{why}: check the path and that you may read and write there.",
                                                    why=why))
        print(f"error: {translate(said, lang)}", file=sys.stderr)
    except KeyboardInterrupt:
        print(translate(mark("interrupted"), lang), file=sys.stderr)
        return 130
    return 2
