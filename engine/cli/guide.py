"""`rehearse` and `preflight`: the guided lab run unattended the night before (the same steps the page presses,
engine.guide.rehearsal) and the room's pre-flight (engine.guide.preflight), each said in English or Korean."""
from __future__ import annotations

import threading
from pathlib import Path

from engine.cli.output import say_line
from engine.errors import ConfigError
from engine.messages import say, translate

BUDGETS = {"1": 1.0, "0.5": 0.5, "0.25": 0.25, "0.1": 0.1}


def register(sub) -> None:
    r = sub.add_parser("rehearse", help="run the whole guided lab unattended and write its rehearsal sheet")
    r.add_argument("--budget", default="0.25", choices=list(BUDGETS),
                   help="the answers' token budget as a share of the lab's (default 0.25; the page's 'a quarter')")
    r.add_argument("--model", choices=("embedded", "shape-only"),
                   help="the model of every step (default: the guided lab's own choice)")
    r.add_argument("--talk-minutes", type=float, default=3.0,
                   help="the presenter's talk at each step, added to the steps' time for the expected length "
                        "(default 3)")
    r.add_argument("--lang", choices=("en", "ko"), default="en", help="the language of the printed sheet")
    r.set_defaults(func=_rehearse)
    p = sub.add_parser("preflight", help="check this machine and the app's address before the room fills")
    p.add_argument("--host", default="127.0.0.1",
                   help="where the app listens, as `make run HOST=` (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8501, help="the app's port, as `make run PORT=` (default 8501)")
    p.add_argument("--base", default="", help="the app's path prefix behind a proxy, as `make run BASE=` (e.g. /lab)")
    p.add_argument("--lang", choices=("en", "ko"), default="en")
    p.set_defaults(func=_preflight)


def _model_path(name: str | None, folder: Path) -> str | None:
    from engine.serving import models

    return None if name is None else models.pick(name, folder).path  # not prepared: its sentence, what to run


def _rehearse(args) -> int:
    from engine.guide import sheet as sheets
    from engine.guide.rehearsal import Rehearsal, sheet_path
    from engine.lab import Lab

    if args.talk_minutes < 0:
        raise ConfigError(say("--talk-minutes cannot be negative: give 0 or more."))
    model = _model_path(args.model, args.settings.models)
    lab = Lab(listen_host="127.0.0.1", settings=args.settings)
    try:
        who = (lab.access.token, "cli")
        cancel = threading.Event()
        said = lambda done, total, text: say_line(translate(text, args.lang))  # noqa: E731
        rehearsal = Rehearsal(lab, BUDGETS[args.budget], model, who=who, talk_s=args.talk_minutes * 60,
                              cancel=cancel, on_step=said)
        out: dict = {}

        def work() -> None:
            try:
                out["sheet"] = rehearsal.run()
            except BaseException as e:  # noqa: BLE001 - said by main() in the main thread (one sentence, exit 2)
                out["error"] = e

        worker = threading.Thread(target=work, name="rehearsal", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.5)
        except KeyboardInterrupt:  # the step's job cancelled, the server left as found, the sheet written
            say_line("stopping the rehearsal after the step under way…")
            cancel.set()
            worker.join()
        if "error" in out:
            raise out["error"]
        sheet = out["sheet"]
        print(sheets.text(sheet, args.lang), flush=True)
        path = sheet_path(lab.store.path)
        say_line(f"wrote {path} and {path.with_suffix('.md')}")
        return 0 if not sheet.failed and not sheet.cancelled else 1
    finally:
        lab.shutdown()


MARK = {"ok": "✓", "warn": "!", "fail": "✗"}


def _preflight(args) -> int:
    """Each check a line; exit 1 when one fails (a script before the room fills can stop on it)."""
    from engine.guide import preflight
    from engine.lab import Lab
    from engine.serving.config import check_port

    check_port(args.port)
    lab = Lab(listen_host=args.host, settings=args.settings)
    try:
        found = preflight.checks(lab, args.host, args.port, args.base, own_pid=-1)  # asked from outside the app
    finally:
        lab.shutdown()
    for c in found:
        say_line(f"{MARK[c.level]} {translate(c.what, args.lang)}: {translate(c.said, args.lang)}")
    return 1 if any(c.level == preflight.FAIL for c in found) else 0
