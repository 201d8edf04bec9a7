"""Two processes of the app press Start on one port at the same moment: count the vLLM servers (goal: 1).

Each round starts two processes on one data folder, lets both finish importing, then tells both "go"
at once (one line each on their stdin):
  app+app  two app processes (a Python process hosting engine.lab.Lab, as the Streamlit process does;
           tests/test_one_server.py drives two real Streamlit apps through a browser): each presses Start
  app+cli  one app process presses Start while `python -m engine serve --detach` starts too
When both have answered: exactly one vLLM API server of ours must run, the record must name it, the
one that came second must have followed it (the app) or said in one sentence who holds the port (the
CLI); then `python -m engine status` runs and the server must still be there (status only reports);
then `python -m engine stop` and nothing of ours may remain. Real vLLM (CPU build, embedded model); the
servers are stopped while they load, so a round takes seconds, not a full start.

  .venv/bin/python bench/one_server.py --rounds 20        # writes bench/results/one-server.md
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.observe import hardware  # noqa: E402
from engine.serving import proctree  # noqa: E402
from engine.serving.config import API_SERVER_MODULE  # noqa: E402

APP = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {root!r})
    from engine.serving import models
    from engine.lab import Lab, LabError
    from engine.settings import from_env
    lab = Lab(from_env(), port={port})
    spec = models.embedded(from_env().models)
    cfg = lab.default_config(spec).with_changes(cpu_kvcache_gib=1, enforce_eager=True)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        lab.start_server(cfg, spec)
        s = lab.server.snapshot()
        out = {{"said": s.notice or "", "pid": s.pid, "adopted": s.adopted}}
    except LabError as e:
        out = {{"said": str(e), "pid": None, "adopted": False}}
    print(json.dumps(out), flush=True)
    time.sleep(3600)  # an app stays open
""")

CLI = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from engine import cli
    from engine.serving import server, models  # imported before "go", as the app's are
    print("ready", flush=True)
    sys.stdin.readline()
    sys.exit(cli.main(["serve", "--model", "embedded", "--port", "{port}", "--kv-cache-gib", "1",
                       "--enforce-eager", "--detach"]))
""")


def spawn(kind: str, port: int, env: dict) -> subprocess.Popen:
    code = (APP if kind == "app" else CLI).format(root=str(ROOT), port=port)
    argv = [sys.executable, "-c", code] if kind == "app" else [sys.executable, "-c", code]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, cwd=ROOT)
    return p


def wait_line(p: subprocess.Popen, pred, timeout_s: float = 300) -> str:
    """The first line of `p`'s output that `pred` accepts (the others are kept in p.seen)."""
    deadline = time.time() + timeout_s
    p.seen = getattr(p, "seen", [])
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"process ended before answering: {''.join(p.seen[-20:])}")
        p.seen.append(line)
        if pred(line):
            return line.rstrip()
    raise RuntimeError("no answer in time")


def answer(kind: str, p: subprocess.Popen) -> dict:
    if kind == "app":
        return json.loads(wait_line(p, lambda line: line.startswith("{")))
    # the CLI prints the command line once its start returned (it launched), or one "error:" sentence
    line = wait_line(p, lambda line: line.startswith("error:") or API_SERVER_MODULE in line)
    if line.startswith("error:"):
        return {"said": line[len("error: "):], "pid": None, "adopted": False}
    return {"said": "", "pid": "launched", "adopted": False}


def api_servers(home: str, port: int) -> list[psutil.Process]:
    out = []
    for p, _ in proctree.tagged(home, port):
        try:
            if API_SERVER_MODULE in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def cli(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def one_round(mode: str, port: int, env: dict, home: str, runtime: Path) -> dict:
    kinds = ("app", "app") if mode == "app+app" else ("app", "cli")
    t0 = time.monotonic()
    procs = [spawn(k, port, env) for k in kinds]
    seen_api: set[int] = set()
    try:
        for p in procs:
            wait_line(p, lambda line: line.strip() == "ready")
        for p in procs:  # both at once
            p.stdin.write("go\n")
            p.stdin.flush()
        answers = [answer(k, p) for k, p in zip(kinds, procs)]
        servers = api_servers(home, port)
        seen_api = {s.pid for s in servers}
        try:
            record_pid = json.loads((runtime / f"server-{port}.json").read_text())["pid"]
        except (OSError, ValueError, KeyError):
            record_pid = None
        # the one that came second: followed (an app, with a sentence) or refused (with a sentence)
        second = [a for a in answers if a["adopted"] or a["pid"] is None]
        said_ok = len(second) == 1 and bool(second[0]["said"])
        status = cli(["status", "--port", str(port)], env)
        alive_after_status = [s.pid for s in servers if proctree.alive(s)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
    stop = cli(["stop", "--port", str(port)], env)
    time.sleep(1.0)
    left = {p.pid: p for p, _ in proctree.tagged(home)}
    left.update((p.pid, p) for sid in seen_api for p in proctree.session(sid))
    left_names = [proctree.name(p) for p in left.values() if proctree.alive(p)]
    for p in left.values():  # keep later rounds clean even if this one failed
        proctree.stop([p], grace_s=2)
    return {
        "mode": mode, "servers": len(servers), "record_names_it": record_pid in seen_api,
        "second_said": said_ok, "said": next((a["said"] for a in second), ""),
        "status_rc": status.returncode, "status_kept_it": len(alive_after_status) == len(servers),
        "stop_said": stop.stdout.strip().splitlines()[-1:] or [""], "left_after_stop": left_names,
        "seconds": round(time.monotonic() - t0, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20, help="rounds of each mode")
    ap.add_argument("--modes", default="app+app,app+cli")
    ap.add_argument("--port", type=int, default=int(os.environ.get("SERVING_LAB_VLLM_PORT", "9105")))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "one-server.md"),
                    help="the report (markdown); '-' for none")
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="one-server-"))
    runtime = work / "runtime"
    runtime.mkdir(parents=True)
    env = {**os.environ, "SERVING_LAB_HOME": str(work), "SERVING_LAB_RUNTIME": str(runtime),
           "SERVING_LAB_DB": str(work / "history.sqlite"), "PYTHONUNBUFFERED": "1"}
    env.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache" / "serving-lab" / "models"))
    home = str(runtime.resolve())
    rows = []
    started = time.monotonic()
    for mode in args.modes.split(","):
        for r in range(1, args.rounds + 1):
            row = {"round": r, **one_round(mode, args.port, env, home, runtime)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    bad = [r for r in rows if r["servers"] != 1 or not r["record_names_it"] or not r["second_said"]
           or not r["status_kept_it"] or r["left_after_stop"]]
    took = time.monotonic() - started
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    if args.out != "-":
        machine = hardware.summary_line(hardware.describe())
        lines = [
            "# Two processes press Start on one port at once: how many vLLM servers",
            "",
            f"Measured {datetime.now():%Y-%m-%d %H:%M} on {machine}"
            f" (shared with other work: load average "
            f"{os.getloadavg()[0]:.0f}); vLLM CPU build, embedded model. `python bench/one_server.py --rounds "
            f"{args.rounds}`: {len(rows)} rounds in {took / 60:.1f} min.",
            "",
            f"**{len(rows)} rounds: {sum(r['servers'] for r in rows)} servers in all, "
            f"{sum(max(0, r['servers'] - 1) for r in rows)} duplicates, {len(bad)} rounds failing a check.**",
            "",
            "Each round: both processes import everything, then both are told to start at the same instant. "
            "Checks: exactly one API server of ours; the server record names it; the second one either follows it "
            "(an app) or says who holds the port (the CLI); `python -m engine status` leaves it running; "
            "`python -m engine stop` leaves nothing of ours.",
            "",
            "| mode | round | API servers | record names it | second said why | status kept it | left after stop "
            "| s | what the second said |",
            "|---|---:|---:|---|---|---|---:|---:|---|",
        ]
        for x in rows:
            lines.append(f"| {x['mode']} | {x['round']} | {x['servers']} | {x['record_names_it']} | {x['second_said']} "
                         f"| {x['status_kept_it']} | {len(x['left_after_stop'])} | {x['seconds']} | "
                         f"{x['said'][:160].replace('|', '/')} |")
        Path(args.out).write_text("\n".join(lines) + "\n")
        print(f"{len(rows)} rounds, {len(bad)} failing -> {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
