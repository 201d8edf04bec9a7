"""The guided lab's findings twice on one machine, once quiet and once with a CPU hog beside it: the
loaded pass must say it was disturbed, and no finding that one pass calls real may be called the
opposite by the other. Headless, through the Guide's own steps (as bench/guide_gpu.py); it starts its own vLLM
server (the embedded model, the lab's flags) and stops it at the end.

    .venv/bin/python bench/guide_noise.py --out OUTDIR [--scale 0.25] [--hog "stress-ng --cpu 2"] [--loaded-first]
    python3 bench/guide_noise.py --model shape-only --out OUT --only quiet|loaded --results R   (one pass per call)
    python3 bench/guide_noise.py --combine R.quiet.json R.loaded.json --results R --out OUT

Writes OUTDIR/history.sqlite (every run), bench/results/guide-noise-cpu.json and .md (--results to change)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from common import ROOT, bench_lab, free_port, wait_ready  # noqa: E402 - bench/common.py puts the project on the path

from engine.messages import translate  # noqa: E402
from engine.observe import disturbance, hardware  # noqa: E402
from engine.serving import models  # noqa: E402
from engine.settings import from_env  # noqa: E402

STEPS = ("naive", "free", "start", "test-query", "sequential", "concurrent", "tuning", "streaming")
CLAIM = {1: "the notebook's claim, beyond noise", -1: "the opposite, beyond noise", 0: "no measurable difference",
         None: "not decided"}


def run_steps(lab, scale: float) -> dict:
    """Every measuring step of the guided lab, in order; the six findings and each step's runs' disturbance."""
    g = lab.guide
    g.reset()
    g.set_scale(scale)
    t_all = time.time()
    steps = {}
    for sid in STEPS:
        t0 = time.time()
        g.go_to(sid)
        job = g.run_step(sid)
        if sid == "start":
            if not wait_ready(lab, t0):
                raise SystemExit("the vLLM server did not start")
        elif job is not None and hasattr(job, "active"):
            while job.active:
                time.sleep(0.5)
            if job.error:
                raise SystemExit(f"step {sid} failed: {job.error}")
        runs = g.runs(sid)
        steps[sid] = {"seconds": round(time.time() - t0, 1), "runs": len(runs),
                      "disturbed": [disturbance.disturbed(r.extra) for r in runs],
                      "disturbance": [(d := r.extra.beside.disturbance) and d.to_dict() for r in runs],
                      "said": [translate(s, "en") for r in runs if (s := disturbance.said(r.extra))]}
        print(f"  {sid}: {steps[sid]['seconds']} s, {len(runs)} runs, disturbed {steps[sid]['disturbed']}", flush=True)
    found = [{"number": f.number, "title": translate(f.title, "en"), "claim": f.claim, "text": translate(f.text, "en")}
             for f in g.findings()]
    for f in found:
        print(f"  {f['number']}. {f['title']} [{CLAIM[f['claim']]}] {f['text']}", flush=True)
    return {"seconds": round(time.time() - t_all, 1), "steps": steps, "findings": found}


def hog(cmd: str) -> int:
    """The CPU hog, started OUTSIDE this process's tree (a shell that exits at once leaves it to init): a child of
    the bench would count as the run's own CPU (disturbance.CpuWatch adds the client's children), and the loaded
    pass would read as quiet. Returns its process group, for `os.killpg` at the end."""
    print(f"hog: {cmd}", flush=True)
    starter = subprocess.run(["sh", "-c", f"setsid sh -c {shlex.quote(cmd)} >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    pid = int(starter.stdout.strip())
    time.sleep(0.5)  # setsid has made the group
    return os.getpgid(pid)


def verdict(quiet: dict, loaded: dict) -> dict:
    """The bench's two checks: the loaded pass says it was disturbed; no finding called real by one pass is called
    the opposite by the other."""
    measured = [d for s in loaded["steps"].values() for d in s["disturbed"]]
    contradictions = [q["number"] for q, ld in zip(quiet["findings"], loaded["findings"]) if {q["claim"], ld["claim"]}
                      == {1, -1}]
    loaded_claims = [f["number"] for f in loaded["findings"] if f["claim"] in (1, -1)]
    return {"loaded_runs_disturbed": f"{sum(measured)} of {len(measured)}", "loaded_says_disturbed": any(measured),
            "loaded_claims_despite_disturbance": loaded_claims, "contradictions": contradictions,
            "holds": any(measured) and not contradictions and not loaded_claims}


def markdown(out: dict) -> str:
    lines = [f"# The guided lab's findings, quiet and beside a CPU hog ({out['when']})", "",
             f"Machine: {out['machine']}. Model: {out['model']}, answers at {out['scale']:g}× the lab's token "
             "budget, "
             f"each short vLLM step run {out['repeats']} times. Hog in the loaded pass: `{out['hog']}`.", "",
             f"Command: `{out['command']}`", "",
             "| # | quiet pass | loaded pass |", "|---|---|---|"]
    for q, ld in zip(out["quiet"]["findings"], out["loaded"]["findings"]):
        lines.append(f"| {q['number']} | **{q['title']}** ({CLAIM[q['claim']]}) {q['text']} | **{ld['title']}** "
                     f"({CLAIM[ld['claim']]}) {ld['text']} |")
    lines += ["", "| step | quiet: s, runs disturbed | loaded: s, runs disturbed |", "|---|---|---|"]
    for sid in STEPS:
        q, ld = out["quiet"]["steps"][sid], out["loaded"]["steps"][sid]
        lines.append(f"| {sid} | {q['seconds']} s, {sum(q['disturbed'])}/{q['runs']} | {ld['seconds']} s, "
                     f"{sum(ld['disturbed'])}/{ld['runs']} |")
    v = out["verdict"]
    lines += ["", f"Loaded pass disturbed: {v['loaded_runs_disturbed']} runs. Findings the loaded pass still claims: "
              f"{v['loaded_claims_despite_disturbance'] or 'none'}. Contradictions between the passes: "
              f"{v['contradictions'] or 'none'}. **{'Holds' if v['holds'] else 'Does not hold'}.**", ""]
    said = next((s for st in out["loaded"]["steps"].values() for s in st["said"]), None)
    if said:
        lines += [f"What the loaded pass said beside its numbers, e.g.: \"{said}\"", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--hog", default="stress-ng --cpu 2")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "guide-noise-cpu")
    ap.add_argument("--loaded-first", action="store_true", help="the loaded pass first (the quiet one's session stays)")
    ap.add_argument("--only", choices=("quiet", "loaded"),
                    help="one pass, written to RESULTS.PASS.json (a GPU call's 10 minutes hold one pass at a time)")
    ap.add_argument("--combine", nargs=2, type=Path, metavar=("QUIET_JSON", "LOADED_JSON"),
                    help="judge two passes written with --only and write RESULTS.md/.json (no server started)")
    a = ap.parse_args()
    if a.combine:
        quiet, loaded = (json.loads(p.read_text()) for p in a.combine)
        return finish({**quiet, "loaded": loaded["loaded"], "hog": loaded["hog"],  # the hog is the loaded pass's
                       "command": f"{quiet['command']} ; {loaded['command']}"}, a.results)
    os.environ.setdefault("SERVING_LAB_GUIDE_EAGER", "1")  # no compiling: each restart ready sooner
    os.environ.setdefault("SERVING_LAB_RUNTIME", str(a.out / "runtime"))  # its server's record, apart from others
    lab = bench_lab(a.out, free_port())
    lab.guide.set_model(models.pick(a.model, from_env().models).path)
    from engine.guide import REPEATS

    out = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": hardware.summary_line(hardware.describe()), "model": a.model, "scale": a.scale,
           "repeats": REPEATS, "hog": a.hog, "command": " ".join(["python", *sys.argv])}
    try:
        for name in (a.only,) if a.only else ("loaded", "quiet") if a.loaded_first else ("quiet", "loaded"):
            print(f"== {name}", flush=True)
            if name == "quiet":
                out["quiet"] = run_steps(lab, a.scale)
                continue
            group = hog(a.hog)
            try:
                out["loaded"] = run_steps(lab, a.scale)
            finally:
                os.killpg(group, signal.SIGKILL)
    finally:
        lab.server.stop()
        lab.shutdown()
    if a.only:
        a.results.parent.mkdir(parents=True, exist_ok=True)
        a.results.with_suffix(f".{a.only}.json").write_text(json.dumps(out, indent=1, ensure_ascii=False))
        return 0
    return finish(out, a.results)


def finish(out: dict, results: Path) -> int:
    """The verdict over both passes, written as RESULTS.json and RESULTS.md."""
    out["verdict"] = verdict(out["quiet"], out["loaded"])
    results.parent.mkdir(parents=True, exist_ok=True)
    results.with_suffix(".json").write_text(json.dumps(out, indent=1, ensure_ascii=False))
    results.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))
    return 0 if out["verdict"]["holds"] else 1


if __name__ == "__main__":
    sys.exit(main())
