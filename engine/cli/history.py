"""`export`, `report`, `import`: the saved runs out of the history and into it (results/store.py)."""
from __future__ import annotations

import sys

from engine.cli.output import check_writable, say_line, write
from engine.errors import LabError
from engine.messages import say


def register(sub) -> None:
    e = sub.add_parser("export", help="export saved runs (all, or the ids given)")
    e.add_argument("ids", nargs="*")
    e.add_argument("--format", choices=["json", "csv", "csv-runs"], default="json",
                   help="json (vllm bench serve's keys, with every request), csv (one row per request) or "
                        "csv-runs (one row per run: its summary)")
    e.add_argument("--out")
    e.set_defaults(func=_export)
    rep = sub.add_parser("report", help="write saved runs as one self-contained HTML report (to mail)")
    rep.add_argument("ids", nargs="+", metavar="RUN_ID")
    rep.add_argument("-o", "--out", default="serving-lab-report.html", help="default: serving-lab-report.html")
    rep.set_defaults(func=_report)
    i = sub.add_parser("import", help="import runs exported elsewhere (e.g. from a GPU box)")
    i.add_argument("files", nargs="+")
    i.set_defaults(func=_import)


def _export(args) -> int:
    from engine.results.store import RunStore

    if args.out:
        check_writable(args.out)
    store = RunStore(args.settings.db)
    ids = args.ids or None
    for run_id in ids or ():
        if run_id not in store:
            raise LabError(say("No run '{run}' in the history; it may have been deleted: leave the ids out to "
                               "export every run.", run=run_id))
    if not ids and not store.list(limit=1):  # an empty [] would read as a broken export
        say_line(say("There are no runs in the history yet, so nothing was exported: run one (python -m engine run "
                     "SCENARIO) or import some (python -m engine import FILE) first."))
        return 0
    text = (store.export_csv(ids, per="run") if args.format == "csv-runs" else store.export_csv(ids)
            if args.format == "csv" else store.export_json(ids))
    if args.out:
        write(args.out, text)
    else:
        sys.stdout.write(text)
    return 0


def _report(args) -> int:
    """The runs as one HTML file that opens anywhere with no network (what History's download writes)."""
    from engine.figures.report import build_report
    from engine.results.store import RunStore

    check_writable(args.out)
    store = RunStore(args.settings.db)
    runs = [store.load(run_id) for run_id in args.ids]  # an unknown or damaged one: its sentence, nothing written
    write(args.out, build_report(runs, "en"))
    return 0


def _import(args) -> int:
    from engine.results.store import RunStore

    store = RunStore(args.settings.db)
    for path in args.files:
        before = {r.id for r in store.list()}
        ids = store.import_file(path)
        new = [i for i in ids if i not in before]
        say_line(f"{path}: {len(new)} new, {len(ids) - len(new)} already there")
    return 0
