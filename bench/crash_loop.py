"""Kill the app at random moments, start it again, count orphans and duplicate servers (goal: 0 / 0).

Each round: an app starts a vLLM server and is SIGKILLed at a random moment of the start; a new app
adopts (or cleans up) and runs a load test with two client processes, and is SIGKILLed at a random
moment of it; a third app adopts and checks: exactly one API server of ours, every process of ours
belongs to it, no client process left; then it stops the server and nothing of ours may remain.

The "app" is a Python process hosting engine.lab.Lab, as the Streamlit process does (the browser is
not what owns processes; tests/test_e2e_crash.py kills the real Streamlit process through a browser).

  .venv/bin/python bench/crash_loop.py --rounds 10      # 20 kills; writes bench/results/crash-loop.md
"""
from __future__ import annotations

import argparse
import json
import os
import random
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
    from engine.measure.workloads import prompts
    from engine.lab import Lab
    from engine.measure.load.spec import LoadSpec
    from engine.settings import from_env
    lab = Lab(from_env(), port={port})
    snap = lab.server.snapshot()
    print(json.dumps({{"state": snap.state, "notice": snap.notice, "adopted": snap.adopted}}), flush=True)
    spec = models.embedded(from_env().models)
    cfg = lab.default_config(spec).with_changes(cpu_kvcache_gib=1, enforce_eager=True)
    mode = sys.argv[1]
    if mode in ("measure", "check") and snap.state in ("starting", "ready"):
        lab.server.wait_ready(900)
    elif mode != "stop":
        lab.start_server(cfg, spec)
        if mode != "start":
            lab.server.wait_ready(900)
    if mode == "measure":
        lab.run_load(LoadSpec(base_url="", model="", prompts=list(prompts.LAB_CONCURRENT), num_requests=200,
                              concurrency=8, workers=2, max_tokens=128, ignore_eos=True))
    if mode == "stop":
        lab.stop_server()
    print("acting", flush=True)
    if mode != "stop":
        time.sleep(3600)
""")


def tagged(home: str) -> list[tuple[psutil.Process, proctree.Tag]]:
    return proctree.tagged(home)


def _describe(p: psutil.Process) -> str:
    try:
        return f"{proctree.name(p)} in session {os.getsid(p.pid)}"
    except OSError:
        return proctree.name(p)


def run_app(mode: str, port: int, env: dict) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-c", APP.format(root=str(ROOT), port=port), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    first = json.loads(proc.stdout.readline())
    return proc, first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10, help="each round kills the app twice")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "crash-loop.md"))
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="crash-loop-"))
    runtime = work / "runtime"
    env = {**os.environ, "SERVING_LAB_HOME": str(work), "SERVING_LAB_RUNTIME": str(runtime),
           "SERVING_LAB_DB": str(work / "history.sqlite")}
    env.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache" / "serving-lab" / "models"))
    runtime.mkdir(parents=True, exist_ok=True)
    home = str(runtime.resolve())
    port = 9400 + rnd.randrange(500)
    rows, orphans_total, dupes_total = [], 0, 0
    seen_api: set[int] = set()
    for r in range(1, args.rounds + 1):
        # 1. kill while starting
        a, _ = run_app("start", port, env)
        a.stdout.readline()  # "acting": Start was pressed
        t_kill = rnd.uniform(0.2, 40.0)
        time.sleep(t_kill)
        a.send_signal(signal.SIGKILL)
        a.wait()
        # 2. adopt, measure, kill while measuring
        b, seen_b = run_app("measure", port, env)
        b.stdout.readline()  # "acting": the load test runs
        t_kill2 = rnd.uniform(0.5, 8.0)
        time.sleep(t_kill2)
        had_clients = [c.pid for c in psutil.Process(b.pid).children() if "spawn_main" in " ".join(c.cmdline())
                       and "resource_tracker" not in " ".join(c.cmdline())] if b.poll() is None else []
        b.send_signal(signal.SIGKILL)
        b.wait()
        time.sleep(3.0)  # a client still importing when the app died notices once it runs
        clients_left = [c for c in had_clients if proctree.same_process(c, None)]
        # 3. adopt and check
        c, seen_c = run_app("check", port, env)
        c.stdout.readline()
        procs = tagged(home)
        servers = [p for p, _ in procs if API_SERVER_MODULE in " ".join(p.cmdline())]
        seen_api |= {p.pid for p in servers}
        live = {p.pid for p in servers}
        starts = {t.start_id for _, t in procs}
        dupes = max(0, len(servers) - 1)
        # Orphans: clients left, another start's tagged processes, or anything in the session of an API
        # server seen earlier that is gone (vLLM's renamed EngineCore and workers carry no readable tag).
        stray = [p for sid in seen_api - live for p in proctree.session(sid)]
        orphans = len(clients_left) + (len(starts) - 1 if len(starts) > 1 else 0) + len(stray)
        c.send_signal(signal.SIGKILL)
        c.wait()
        s, _ = run_app("stop", port, env)
        s.stdout.readline()
        s.wait(timeout=120)
        time.sleep(2.0)  # what Stop killed has gone, not just been signalled
        left_procs = {p.pid: p for p, _ in tagged(home)}
        left_procs.update((p.pid, p) for sid in seen_api for p in proctree.session(sid))
        left = [_describe(p) for p in left_procs.values() if proctree.alive(p)]
        stray_names = [_describe(p) for p in stray]
        orphans += len(left)
        orphans_total += orphans
        dupes_total += dupes
        row = {"round": r, "kill_during_start_s": round(t_kill, 1), "after_kill_1": seen_b["state"],
               "notice_1": bool(seen_b["notice"]), "kill_during_load_s": round(t_kill2, 1),
               "client_processes": len(had_clients), "after_kill_2": seen_c["state"], "servers": len(servers),
               "orphans": orphans, "duplicates": dupes, "left_after_stop": len(left),
               "what": stray_names + [f"client {c}" for c in clients_left] + left}
        rows.append(row)
        print(json.dumps(row), flush=True)
        for p, _ in tagged(home):  # keep later rounds clean even if this one failed
            proctree.stop([p], grace_s=2)

    machine = hardware.summary_line(hardware.describe())
    lines = [
        "# App killed at random moments: orphans and duplicate servers",
        "",
        f"Measured {datetime.now():%Y-%m-%d %H:%M} on {machine}"
        f"; vLLM CPU build, embedded model, --enforce-eager. "
        f"`python bench/crash_loop.py --rounds {args.rounds} --seed {args.seed}`.",
        "",
        f"**{2 * args.rounds} kills: {orphans_total} orphans, {dupes_total} duplicate servers.**",
        "",
        "| round | kill during start (s) | next app saw | kill during load (s) | client procs | next app saw "
        "| API servers | orphans | duplicates | left after Stop |",
        "|---:|---:|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for x in rows:
        lines.append(f"| {x['round']} | {x['kill_during_start_s']} | {x['after_kill_1']}"
                     f"{' (cleaned leftovers)' if x['notice_1'] else ''} | {x['kill_during_load_s']} | "
                     f"{x['client_processes']} | {x['after_kill_2']} | {x['servers']} | {x['orphans']} | "
                     f"{x['duplicates']} | {x['left_after_stop']} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"{2 * args.rounds} kills: {orphans_total} orphans, {dupes_total} duplicates -> {args.out}")
    return 1 if orphans_total or dupes_total else 0


if __name__ == "__main__":
    sys.exit(main())
