"""Small CLI and page traps, through the real command line where a person meets them."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from engine.cli import build_parser, _joined_extra
from engine.errors import ConfigError
from engine.measure.judge.cost import check_price
from engine.messages import QUOTE_LIMIT, say
from engine.runs import check_url

from .conftest import ROOT
from .said import read, said, values


def cli(*args: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "SERVING_LAB_HOME": str(home), "SERVING_LAB_RUNTIME": str(home / "runtime"),
           "SERVING_LAB_DB": str(home / "history.sqlite")}
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_export_with_no_runs_says_there_are_none(tmp_path):
    done = cli("export", home=tmp_path)
    assert done.returncode == 0
    assert read("There are no runs in the history yet, so nothing was exported: run one (python -m engine run "
                "SCENARIO) or import some (python -m engine import FILE) first.", done.stdout) == {}
    assert "[]" not in done.stdout


def test_a_command_that_speaks_korean_refuses_in_korean(tmp_path):
    """`rehearse --lang ko` prints its sheet in Korean, so its one-sentence refusal is in Korean too."""
    from engine.messages import catalog

    done = cli("rehearse", "--lang", "ko", "--talk-minutes", "-1", home=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    korean = catalog("ko").gettext("--talk-minutes cannot be negative: give 0 or more.")
    assert done.stderr == f"error: {korean}\n" and korean.startswith("--talk-minutes는"), done.stderr


def test_importing_the_same_run_twice_says_nothing_new(tmp_path):
    example = next((ROOT / "examples").glob("*.json"))
    first = cli("import", str(example), home=tmp_path)
    n = int(re.search(r": (\d+) new, 0 already there", first.stdout).group(1))
    assert n >= 1, first.stdout + first.stderr
    again = cli("import", str(example), home=tmp_path)
    assert again.stdout.strip().endswith(f": 0 new, {n} already there"), again.stdout


def readme_extra_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [line.split("#", 1)[0].strip() for line in text.splitlines()
            if line.startswith(".venv/bin/python -m engine") and "--extra" in line]


@pytest.mark.parametrize("line", readme_extra_lines())
def test_the_readmes_extra_lines_parse_as_written(line):
    argv = shlex.split(line)[3:]  # after ".venv/bin/python -m engine"
    quoted = shlex.split(line)[shlex.split(line).index("--extra") + 1]
    args = build_parser().parse_args(_joined_extra(argv))
    assert args.extra == quoted


def test_the_readme_has_extra_lines_of_both_kinds():
    lines = readme_extra_lines()
    assert any(" " in shlex.split(x)[-1] for x in lines) and any(" " not in shlex.split(x)[-1] for x in lines)


@pytest.mark.parametrize("argv", [["serve", "--extra", "--seed=0"], ["serve", "--extra=--seed=0"],
                                  ["serve", "--extra", "--enforce-eager"]])
def test_extra_takes_a_single_flag_in_either_form(argv):
    assert build_parser().parse_args(_joined_extra(argv)).extra == argv[-1].removeprefix("--extra=")


def test_a_huge_price_is_refused_in_words_by_the_cli(tmp_path):
    done = cli("run", "concurrent-10", "--url", "http://127.0.0.1:9", "--price-per-gpu-hour", "1e30", home=tmp_path)
    assert done.returncode == 2
    with pytest.raises(ConfigError) as refused:
        check_price(1e30)
    assert done.stderr == f"error: {refused.value}\n"  # the one sentence the engine says, whole
    assert said(refused.value).template.startswith("A price per GPU-hour of {price:g} cannot be used")
    assert values(refused.value) == {"price": 1e30}
    with pytest.raises(ConfigError):
        check_price(float("inf"))
    assert check_price(2.5) == 2.5 and check_price(None) is None


def test_a_long_url_is_shortened_where_a_sentence_quotes_it():
    url = "http://" + "a" * 5000
    with pytest.raises(ConfigError) as e:
        check_url(url + "?q=1")
    said = str(e.value)
    assert len(said) < 400 and "…" in said
    assert len(say("Connected to {url}.", url=url)) < QUOTE_LIMIT + 20
