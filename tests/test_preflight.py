"""The room's pre-flight against real sockets, processes and fontconfig: an app bound to
loopback is not reachable by the room, one on every interface is; the token when exposed; a port held by
another program is named; no Korean font is said with what to install; the CLI prints a line each."""
from __future__ import annotations

import dataclasses
import http.server
import os
import socket
import subprocess
import sys
import threading

import pytest

from engine.guide import preflight as pf
from engine.lab import Lab
from engine.results.store import RunStore

from .conftest import cli_in_process, free_port
from .said import read

needs_a_network = pytest.mark.skipif(not pf.interfaces(), reason="this machine has no interface but loopback")


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # what Streamlit answers on /_stcore/health (under the base path)
        ok = self.path.endswith("/_stcore/health")
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _serving(host: str, port: int):
    server = http.server.ThreadingHTTPServer((host, port), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def lab(tmp_path, lab_settings):
    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "history.sqlite"))
    yield lab
    lab.shutdown()


def test_an_app_on_loopback_only_is_not_reachable_by_the_room():
    c = pf.address("127.0.0.1", 8501, "", proxied=False)
    assert c.level == pf.FAIL and "make run HOST=0.0.0.0" in c.said


@needs_a_network
def test_the_address_is_tried_through_another_interface():
    port = free_port()
    only_here = _serving("127.0.0.1", port)  # says "0.0.0.0" but listens on loopback: the room gets nothing
    try:
        c = pf.address("0.0.0.0", port, "/lab", proxied=False)
        assert c.level == pf.FAIL and "Nothing answered" in c.said and f":{port}/lab/" in c.said, c
    finally:
        only_here.shutdown()
        only_here.server_close()
    everywhere = _serving("0.0.0.0", port)
    try:
        c = pf.address("0.0.0.0", port, "/lab", proxied=False)
        nic, ip = pf.interfaces()[0]
        assert c.level == pf.OK and f"http://{ip}:{port}/lab/" in c.said and nic in c.said, c
    finally:
        everywhere.shutdown()
        everywhere.server_close()


def test_an_exposed_app_needs_the_presenter_token(tmp_path, lab_settings):
    exposed = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), listen_host="0.0.0.0")
    keyed = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "k.sqlite"), listen_host="0.0.0.0",
                presenter_token="t")
    try:
        c = pf.token(exposed, proxied=False)
        assert c.level == pf.FAIL and "SERVING_LAB_PRESENTER_TOKEN" in c.said
        assert pf.token(keyed, proxied=False).level == pf.OK
    finally:
        exposed.shutdown()
        keyed.shutdown()


def test_a_port_held_by_another_program_is_named_and_our_own_is_fine():
    port = free_port()
    assert pf.app_port(port, os.getpid()).level == pf.OK  # free
    other = subprocess.Popen([sys.executable, "-c", "import socket, time\ns = socket.socket()\n"
                              f"s.bind(('127.0.0.1', {port}))\ns.listen()\nprint('up', flush=True)\ntime.sleep(120)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "up"
        c = pf.app_port(port, own_pid=os.getpid())
        assert c.level == pf.FAIL and f"pid {other.pid}" in c.said and "make run PORT=" in c.said, c
        assert pf.app_port(port, own_pid=other.pid).level == pf.OK  # the app asking about its own port
    finally:
        other.kill()
        other.wait()


def test_vllms_port_held_by_another_program(lab):
    with socket.socket() as s:
        s.bind(("127.0.0.1", lab.server_port))
        s.listen()
        c = pf.vllm_port(lab)
    assert c.level == pf.FAIL and "SERVING_LAB_VLLM_PORT" in c.said and f"pid {os.getpid()}" in c.said, c
    assert pf.vllm_port(lab).level == pf.OK


def test_no_korean_font_is_said_with_what_to_install(tmp_path, monkeypatch):
    assert pf.korean_font().level == pf.OK  # this machine has Noto CJK (scripts/setup.sh's chromium pulls it)
    empty = tmp_path / "fonts.conf"  # fontconfig with no font folder at all: fc-list finds nothing
    empty.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
                     f"<cachedir>{tmp_path}/cache</cachedir></fontconfig>")
    monkeypatch.setenv("FONTCONFIG_FILE", str(empty))
    c = pf.korean_font()
    assert c.level == pf.FAIL and "fonts-noto-cjk" in c.said
    monkeypatch.setenv("PATH", str(tmp_path))  # no fc-list at all
    assert pf.korean_font().level == pf.WARN


def test_behind_jupyters_proxy_the_room_is_told_who_can_reach_it(tmp_path, monkeypatch, lab_settings):
    behind = dataclasses.replace(lab_settings, behind="jupyter")  # SERVING_LAB_BEHIND, as jupyter_proxy.py starts it
    lab = Lab(behind, port=free_port(), store=RunStore(tmp_path / "history.sqlite"))
    try:
        found = {str(c.what): c for c in pf.checks(lab, "127.0.0.1", free_port(), "/user/kim/serving-lab")}
    finally:
        lab.shutdown()
    assert found["Address for the room"].level == pf.WARN
    assert "/user/kim/serving-lab/" in found["Address for the room"].said
    assert found["Presenter token"].level == pf.OK and "Jupyter" in found["Presenter token"].said


def test_the_cli_prints_a_line_each_and_fails_on_a_failed_check():
    r = cli_in_process("preflight", "--host", "127.0.0.1", "--port", str(free_port()))
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 8, r
    assert lines[0].startswith("✗ Address for the room: "), lines  # the failed check first, with its sentence
    assert read("The app listens only on {host}, so nobody else in the room can reach it: restart it with `make run "
                "HOST=0.0.0.0` and a presenter token.", lines[0]) == {"host": "127.0.0.1"}
    assert any(line.startswith("✓ Korean font:") for line in lines)
    r = cli_in_process("preflight", "--port", str(free_port()), "--lang", "ko")
    assert "✗ 강의실 접속 주소: 앱이 127.0.0.1에서만" in r.stdout, r.stdout
    r = cli_in_process("preflight", "--port", "70000")
    assert r.returncode == 2 and "not a valid port" in r.stderr


def test_a_quoted_command_in_a_preflight_line_shows_as_code_and_nothing_else_as_markdown():
    """The pre-flight's 'restart it with `make run HOST=0.0.0.0`' showed its backticks literally (escaped like
    every other markdown character); the command now shows as code, while the rest stays plain text."""
    import ui

    said = ui.plain_code("restart it with `make run HOST=0.0.0.0` at [the room](http://x) *now*")
    assert "`make run HOST=0.0.0.0`" in said
    assert "\\[the room\\]\\(http://x\\)" in said.replace("\\:", ":") and "\\*now\\*" in said
    assert ui.plain_code("an odd ` backtick") == ui.plain("an odd ` backtick")
