"""The room's pre-flight, run by the presenter: before the room fills, whether attendees can reach the app, whether
it is locked down, the ports, the Korean font, the GPU, the model and the memory; each a line with what to do."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import psutil

from engine.access import LOOPBACK_HOSTS
from engine.errors import LabError
from engine.messages import Message, say
from engine.observe import hardware
from engine.serving.config import fit_check
from engine.serving.states import READY, STARTING

if TYPE_CHECKING:
    from engine.lab import Lab

OK, WARN, FAIL = "ok", "warn", "fail"
ANSWER_S = 3.0  # one GET of the app's health page through another interface


@dataclass(frozen=True)
class Check:
    what: Message  # what was checked: "Address for the room"
    level: str  # OK | WARN | FAIL
    said: Message  # what was found, and what to do about it


def checks(lab: "Lab", host: str | None, port: int, base: str | None = "", *,
           own_pid: int | None = None) -> list[Check]:
    """Every check, in the order a presenter fixes them. `host`/`port`/`base`: where the app listens (None or
    "" host: every interface) and its path prefix; `own_pid`: the app's own process (default: this one, the
    app asking; the CLI asks from outside)."""
    base = "/" + base.strip("/") if base and base.strip("/") else ""
    proxied = lab.settings.behind == "jupyter"
    return [address(host, port, base, proxied), token(lab, proxied), app_port(port, own_pid or os.getpid()),
            vllm_port(lab), korean_font(), gpu(lab), model(lab), memory(lab)]


# -- the room reaches the app ---------------------------------------------------------------------
def interfaces() -> list[tuple[str, str]]:
    """(interface, IPv4 address) of every interface but loopback: where the room's devices come from."""
    return [(name, a.address) for name, addrs in psutil.net_if_addrs().items() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


def address(host: str | None, port: int, base: str, proxied: bool) -> Check:
    what = say("Address for the room")
    if proxied:
        return Check(what, WARN, say("The app is served through Jupyter's proxy at {base}/: only people logged in to "
                                     "this Jupyter server reach it. For a room, run it on its own with `make run "
                                     "HOST=0.0.0.0` (and a presenter token), or share the Jupyter server.",
                                     base=base))
    host = host or "0.0.0.0"
    if host in LOOPBACK_HOSTS:
        return Check(what, FAIL, say("The app listens only on {host}, so nobody else in the room can reach it: "
                                     "restart it with `make run HOST=0.0.0.0` and a presenter token.", host=host))
    nics = [(n, ip) for n, ip in interfaces() if host in ("0.0.0.0", "::", ip)]
    if not nics:
        return Check(what, FAIL, say("This machine has no network address but loopback{where}: connect it to the "
                                     "room's network, then check again.",
                                     where="" if host in ("0.0.0.0", "::") else f" ({host})"))
    tried = []
    for name, ip in nics:
        url = f"http://{ip}:{port}{base}/"
        try:
            answered = httpx.get(f"http://{ip}:{port}{base}/_stcore/health", timeout=ANSWER_S).status_code == 200
        except httpx.HTTPError as e:
            answered, why = False, type(e).__name__
        else:
            why = "HTTP"
        if answered:
            return Check(what, OK, say("Attendees open {url} (it answered through {nic}; a firewall between them and "
                                       "this machine can still block port {port}).", url=url, nic=name, port=port))
        tried.append(f"{url} ({why})")
    return Check(what, FAIL, say("Nothing answered at {tried}: start the app with `make run HOST=0.0.0.0 "
                                 "PORT={port}`, or open port {port} in this machine's firewall.",
                                 tried=", ".join(tried), port=port))


def token(lab: "Lab", proxied: bool) -> Check:
    what = say("Presenter token")
    if lab.access.locked:
        return Check(what, FAIL, say("The app is reachable from the network and no presenter token is set, so "
                                     "nobody can run the lab: restart it with SERVING_LAB_PRESENTER_TOKEN set."))
    if lab.access.exposed:
        return Check(what, OK, say("Set: attendees watch, only whoever types the token acts."))
    if proxied:
        return Check(what, OK, say("Not needed: Jupyter's login decides who reaches the app."))
    return Check(what, OK, say("Not needed while only this machine reaches the app (set "
                               "SERVING_LAB_PRESENTER_TOKEN before exposing it)."))


# -- the ports ------------------------------------------------------------------------------------------
def _listener(port: int) -> psutil.Process | None:
    """The process listening on `port` (None: nobody, or one this user may not see)."""
    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.Error:
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                return psutil.Process(c.pid)
            except psutil.Error:
                return None
    return None


def _is_bound(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _ours(p: psutil.Process, own_pid: int) -> bool:
    """This app: its own process, or a `streamlit run app.py` of this checkout (the CLI asking about the app)."""
    if p.pid == own_pid:
        return True
    try:
        line, cwd = p.cmdline(), p.cwd()
    except psutil.Error:
        return False
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return "streamlit" in " ".join(line) and "app.py" in line and os.path.realpath(cwd) == os.path.realpath(here)


def app_port(port: int, own_pid: int) -> Check:
    what = say("The app's port")
    holder = _listener(port)
    if holder is not None and _ours(holder, own_pid):
        return Check(what, OK, say("Port {port} is this app's.", port=port))
    if holder is None and not _is_bound(port):
        return Check(what, OK, say("Port {port} is free for the app.", port=port))
    name = f"{holder.name()}, pid {holder.pid}" if holder is not None else say("another user's program")
    return Check(what, FAIL, say("Port {port} is held by {name}: stop it, or start the app on another port "
                                 "(`make run PORT=8502`).", port=port, name=name))


def vllm_port(lab: "Lab") -> Check:
    what = say("vLLM's port")
    port = lab.server_port
    snap = lab.server_snapshot()
    if snap.state in (READY, STARTING):
        return Check(what, OK, say("Port {port} is this app's vLLM server's.", port=port))
    if not _is_bound(port):
        return Check(what, OK, say("Port {port} is free for vLLM.", port=port))
    holder = _listener(port)
    name = f"{holder.name()}, pid {holder.pid}" if holder is not None else say("another user's program")
    return Check(what, FAIL, say("Port {port}, where step 3 starts vLLM, is held by {name}: stop it, or give the app "
                                 "another with SERVING_LAB_VLLM_PORT.", port=port, name=name))


# -- this machine ----------------------------------------------------------------------------------
def korean_font() -> Check:
    what = say("Korean font")
    if shutil.which("fc-list") is None:
        return Check(what, WARN, say("fontconfig's fc-list is missing, so the Korean font cannot be checked: install "
                                     "fontconfig and fonts-noto-cjk."))
    try:
        found = subprocess.run(["fc-list", ":lang=ko", "family"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        found = ""
    families = sorted({f.split(",")[0].strip() for f in found.splitlines() if f.strip()},
                      key=lambda f: ("KR" not in f, f))  # a Korean face first where there is one
    if not families:
        return Check(what, FAIL, say("No font on this machine writes Korean, so exported charts and the report's "
                                     "Korean show boxes: install fonts-noto-cjk (apt-get install fonts-noto-cjk)."))
    return Check(what, OK, say("{fonts} write Korean.", fonts=", ".join(families[:2])))


def gpu(lab: "Lab") -> Check:
    what = say("GPU")
    gpus = hardware.gpus()
    if gpus:
        return Check(what, OK, say("{gpus}: vLLM and the naive baseline run there.",
                                   gpus=", ".join(g["name"] for g in gpus)))
    return Check(what, WARN, say("No GPU here: vLLM runs on the CPU and each step takes minutes; pick a quarter or a "
                                 "tenth of the lab's answer length, and rehearse to know how long."))


def model(lab: "Lab") -> Check:
    what = say("Model")
    try:
        spec = lab.guide.model_spec()
    except LabError as e:
        return Check(what, FAIL, e.args[0] if isinstance(e.args[0], Message) else say("{why}", why=str(e)))
    return Check(what, OK, say("{model} is prepared.", model=spec.label))


def memory(lab: "Lab") -> Check:
    what = say("Memory")
    try:
        spec = lab.guide.model_spec()
    except LabError:
        return Check(what, WARN, say("Prepare the model first: its size decides the memory it needs."))
    snap = lab.server_snapshot()
    cfg = lab.guide.lab_config()
    if snap.state == READY and snap.config is not None and snap.config.model == cfg.model:
        return Check(what, OK, say("vLLM already runs this model here."))
    fit = fit_check(cfg, spec, lab.device)
    return Check(what, {"ok": OK, "warn": WARN}.get(fit.level, FAIL), fit.message)
