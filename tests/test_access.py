"""Who may act, checked inside the engine: the presenter token on every Lab action, throttled guesses,
an exposed app with no token locked, the extra-flags policy, and viewers' chat limits."""
from __future__ import annotations

import inspect
from collections import deque

import pytest

from engine import lab as lab_module
from engine.access import CALLER_FAILURES, ROOM_FAILURES, Access
from engine.errors import ConfigError, NotPresenter, Throttled
from engine.chat_desk import ChatLimits, ChatRefused
from engine.results.store import RunStore
from engine.serving.config import REFUSED_EXTRA_FLAGS, ServerConfig, refuse_extra_flags

from .said import said


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_without_a_token_a_laptop_may_act_and_an_exposed_app_may_not():
    Access(None, "127.0.0.1").check(None)
    assert Access(None, "localhost").may_act(None)
    exposed = Access(None, "0.0.0.0")
    assert exposed.locked and not exposed.may_act(None) and not exposed.may_act("anything")
    with pytest.raises(NotPresenter, match="SERVING_LAB_PRESENTER_TOKEN"):
        exposed.check("anything")


def test_the_token_is_required_and_compared_exactly():
    a = Access("s3cret-token", "0.0.0.0")
    a.check("s3cret-token", "ip-1")
    for wrong in (None, "", "s3cret", "s3cret-token ", "S3CRET-TOKEN"):
        with pytest.raises(NotPresenter):
            a.check(wrong, "ip-2")
    assert a.may_act("s3cret-token") and not a.may_act("s3cret")


def test_wrong_tokens_are_throttled_per_caller_and_the_right_one_does_not_help_then():
    clock = Clock()
    a = Access("right", "0.0.0.0", clock=clock)
    for _ in range(CALLER_FAILURES):
        with pytest.raises(NotPresenter):
            a.check("guess", "attacker")
    with pytest.raises(Throttled, match="wait"):
        a.check("right", "attacker")  # no comparison while throttled: guessing right is not revealed
    a.check("right", "presenter")  # another caller is not locked out
    clock.t += 61
    a.check("right", "attacker")


def test_the_room_limit_stops_guessing_from_many_callers_but_not_the_presenter():
    clock = Clock()
    a = Access("right", "0.0.0.0", clock=clock)
    for i in range(ROOM_FAILURES):
        with pytest.raises(NotPresenter):
            a.check("guess", f"caller-{i}")
    with pytest.raises(Throttled):
        a.check("right", "caller-0")  # guessed wrong lately: refused while the room is over its limit
    a.check("right", "presenter")  # never mistyped: not locked out


def test_no_token_is_not_counted_as_a_guess():
    a = Access("right", "0.0.0.0", clock=Clock())
    for _ in range(CALLER_FAILURES * 3):
        with pytest.raises(NotPresenter):
            a.check(None, "viewer")
    a.check("right", "viewer")


@pytest.fixture()
def guarded_lab(tmp_path, monkeypatch, lab_settings):
    """A Lab with a presenter token (no server started: every action must be refused before it runs)."""
    lab = lab_module.Lab(lab_settings, port=1, store=RunStore(tmp_path / "h.sqlite"), presenter_token="tok",
                         listen_host="0.0.0.0", telemetry_interval_s=3600)
    yield lab
    lab.shutdown()


ACTIONS = {  # every state-changing or compute-costing action, with arguments it could be called with
    "start_server": (ServerConfig(model="m"),), "stop_server": (), "restart_server": (ServerConfig(model="m"),),
    "clear_leftovers": (), "run_load": (None,), "run_sweep": (None, [1]), "run_tuning": ([], None),
    "run_naive": (None,), "cancel_job": ("x",), "import_runs": (b"[]", "f.json"), "delete_runs": (["x"],),
    "import_examples": (), "allow_chat_under_load": (True,), "prepare_model": ("shape-only",),
    "attach": ("http://127.0.0.1:1",), "detach": (),
    "run_side_by_side": ("http://127.0.0.1:1", None), "connect": ("http://127.0.0.1:1",),
    "run_slo_search": (None, None, 1, 4), "rehearse": (0.1,),
    "run_measured": ("room", "x", None, None),
}


def test_every_action_of_the_lab_is_guarded():
    guarded = {n for n, f in inspect.getmembers(lab_module.Lab, inspect.isfunction) if getattr(f, "presenter_only", 0)}
    assert guarded == set(ACTIONS), "a Lab action without @presenter_only, or a test that misses one"


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_a_viewer_is_refused_by_the_engine_itself(guarded_lab, name):
    saved = len(guarded_lab.store)
    with pytest.raises(NotPresenter):
        getattr(guarded_lab, name)(*ACTIONS[name], token="wrong", caller="viewer")
    with pytest.raises(NotPresenter):
        getattr(guarded_lab, name)(*ACTIONS[name])
    assert len(guarded_lab.store) == saved and not guarded_lab.jobs.active()


def test_the_presenter_passes_the_guard(guarded_lab):
    assert guarded_lab.delete_runs(["nothing"], token="tok", caller="presenter") == 0
    guarded_lab.allow_chat_under_load(True, token="tok")
    assert guarded_lab.chat_under_load


def test_a_locked_lab_refuses_chat_too(tmp_path, lab_settings):
    lab = lab_module.Lab(lab_settings, port=1, store=RunStore(tmp_path / "h.sqlite"), listen_host="0.0.0.0",
                         telemetry_interval_s=3600, presenter_token=None)
    try:
        from engine.results.records import RequestRecord

        with pytest.raises(NotPresenter, match="reachable from the network"):
            next(lab.chat([{"role": "user", "content": "hi"}], RequestRecord(0, "hi", 0.0)))
    finally:
        lab.shutdown()


# -- extra flags -----------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ("--port", "9999"), ("--port=9999",), ("--host", "0.0.0.0"), ("--api-key", "k"), ("--trust-remote-code",),
    ("--ssl-keyfile", "/k.pem"), ("--allowed-origins", '["*"]'), ("--middleware", "evil.mod"), ("--uds", "/tmp/s"),
    ("--chat-template", "/etc/passwd"), ("--chat-template=./t.jinja",), ("--allowed-local-media-path", "/"),
    ("--root-path", "/x"), ("--max-model-len", "4096"), ("-tp", "2"), ("--config", "x.yaml"),
])
def test_refused_extra_flags_say_where_the_setting_lives(args):
    with pytest.raises(ConfigError) as e:
        ServerConfig(model="m", extra_args=args).validate()
    assert said(e.value).template in (  # where the setting lives, or the one flag taken in another form
        "The extra flag {flag} is not accepted here: {why}.",
        "The extra flag --chat-template is accepted only as an inline template: a file path would let the server "
        "read files on this machine."), e.value


def test_harmless_extra_flags_and_an_inline_template_pass():
    refuse_extra_flags(("--seed", "0", "--swap-space", "4", "--chat-template", "{% for m in messages %}{% endfor %}"))


def test_the_policy_is_one_list_with_a_reason_for_each():
    assert all(f.startswith("-") and len(why) > 20 for f, why in REFUSED_EXTRA_FLAGS.items())


def test_the_api_key_never_reaches_the_command_line():
    cfg = ServerConfig(model="m", api_key="s3cret")
    assert "s3cret" not in " ".join(cfg.argv()) and "s3cret" not in cfg.shell_command()
    assert "s3cret" not in repr(cfg) and cfg.env()["VLLM_API_KEY"] == "s3cret"


# -- viewers' chat ---------------------------------------------------------------------------------
def test_chat_limits_for_viewers():
    lim = ChatLimits(max_prompt_chars=10, max_context_chars=30, max_tokens=50, per_minute=2)
    recent: deque[float] = deque()
    msg = [{"role": "user", "content": "hello"}]
    with pytest.raises(ChatRefused, match="shorten"):
        lim.admit(recent, [{"role": "user", "content": "x" * 11}], 10, now=0)
    with pytest.raises(ChatRefused, match="Max tokens"):
        lim.admit(recent, msg, 51, now=0)
    with pytest.raises(ChatRefused, match="Clear conversation"):
        lim.admit(recent, [{"role": "assistant", "content": "y" * 30}, *msg], 10, now=0)
    lim.admit(recent, msg, 10, now=0)
    lim.admit(recent, msg, 10, now=1)
    with pytest.raises(ChatRefused, match="wait 59 s"):
        lim.admit(recent, msg, 10, now=1)
    lim.admit(recent, msg, 10, now=61)
