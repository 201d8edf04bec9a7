"""An action's notes on its runs are typed: a name Notes does not know is caught by the type checker at the call
(`make check`), refused when it runs, and no reader asks a run's notes for a name with a default to fall back on
(a wrong name there would read as "not measured", silently)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api as mypy

from engine.measure.load.spec import LoadSpec
from engine.results.records import Notes, Repeat, RoomRound, RunResult
from engine.runs import Runner, Target

ROOT = Path(__file__).resolve().parent.parent


def test_a_name_notes_does_not_know_is_refused_not_kept_aside():
    notes = Notes()
    notes.add(Notes(rehearsal="sheet-1", room=RoomRound(round="r1")))
    assert (notes.rehearsal, notes.room.round) == ("sheet-1", "r1")
    with pytest.raises(TypeError, match="room_round"):
        notes.add(Notes(room_round="r1"))  # type: ignore[call-arg]  # schema 5's flat name
    assert notes.other == {}


def test_the_runner_takes_notes_as_one_typed_argument():
    run = RunResult(kind="vllm", scenario="s", label="l", records=[], duration=1.0, started_at=1.7e9)
    run.extra.add(Notes(repeat=Repeat(group="g", index=1, total=3), not_restarted=True))
    assert (run.extra.repeat.group, run.extra.not_restarted, run.extra.repeat.failed) == ("g", True, False)
    spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=1, max_tokens=4)
    with pytest.raises(TypeError):  # no **notes to swallow a flat name until the run has been sent
        Runner(save=lambda r: r).load(spec, Target("http://127.0.0.1:9", "m"), repeat_group="g")  # type: ignore[call-arg]


@pytest.mark.slow  # a minute of mypy in a fresh clone; seconds after `make check`, which `make test` runs first
def test_the_type_checker_catches_a_flat_name_at_the_call(tmp_path, monkeypatch):
    code = ("from engine.results.records import Notes, RoomRound\n"
            "from engine.runs import Runner\n"
            "def f(runner: Runner, spec, target) -> None:\n"
            "    runner.load(spec, target, Notes(room=RoomRound(round='r')))\n"
            "    runner.load(spec, target, Notes(room_round='r'))\n"
            "    runner.load(spec, target, Notes(repeat={'group': 'g'}))\n")
    (tmp_path / "calls.py").write_text(code)
    monkeypatch.setenv("MYPYPATH", str(ROOT))
    out, err, status = mypy.run(["--config-file", str(ROOT / "pyproject.toml"),
                                 "--cache-dir", str(ROOT / ".mypy_cache"), str(tmp_path / "calls.py")])
    assert status == 1, out + err
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 2 and '"room_round"' in errors[0] and '"repeat"' in errors[1], out


def test_no_reader_asks_the_notes_for_a_name_with_a_default():
    """`getattr(run.extra, "server_view", None)` read an old flat name as "none" without a word; the parts are
    read as attributes, which the type checker knows."""
    pattern = re.compile(r"getattr\([^(),]*\b(?:extra|notes)\b[^(),]*,\s*['\"]")
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("engine", "app_pages") for p in (ROOT / folder).rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    found += [f"ui.py:{i}" for i, line in enumerate((ROOT / "ui.py").read_text().splitlines(), 1)
              if pattern.search(line)]
    assert found == []
