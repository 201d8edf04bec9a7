"""A served model by its name, not its folder's full path: vLLM names a model started from a
folder by that path unless given --served-model-name, and the sidebar, a remote server's line and the report showed
it whole. The path stays on hover."""
from __future__ import annotations

import dataclasses

import pytest

from engine.figures.report import build_report
from engine.serving.config import ServerConfig
from engine.serving.models import shown_name

from .conftest import app_page
from .guide_runs import _run

PATH = "/srv/models/Meta-Llama-3-8B-Instruct"


@pytest.mark.parametrize("model, shown", [
    (PATH, "Meta-Llama-3-8B-Instruct"),
    (PATH + "/", "Meta-Llama-3-8B-Instruct"),
    ("~/models/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct"),
    ("./models/smol", "smol"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct"),  # a hub id as it is
    ("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct"),  # a served name
    (None, ""),
])
def test_a_model_is_named_by_its_folder_or_its_id(model, shown):
    assert shown_name(model) == shown


def test_a_local_folder_of_two_parts_is_a_path_too(tmp_path, monkeypatch):
    (tmp_path / "models" / "smol").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert shown_name("models/smol") == "smol"


def test_the_sidebar_names_a_model_served_from_a_folder_and_keeps_its_path_on_hover(app_lab, monkeypatch):
    from engine.lab import Lab
    from engine.serving.states import READY

    real = Lab.server_snapshot
    monkeypatch.setattr(Lab, "server_snapshot", lambda self: dataclasses.replace(
        real(self), state=READY, config=ServerConfig(model=PATH, port=9123)))  # no --served-model-name
    at = app_page("app_pages/guide.py")
    lines = [c for c in at.sidebar.caption if "port 9123" in c.value]
    shown = [c.value.replace("\\", "") for c in lines]  # as typed: markdown's escapes dropped
    assert shown == ["Meta-Llama-3-8B-Instruct · port 9123"], [c.value for c in at.sidebar.caption]
    assert lines[0].proto.help == PATH


def test_the_report_names_the_model_and_keeps_its_path_on_hover():
    run = _run("test-query", "vllm", [(1.0, 10)], 10)
    run.model = PATH
    html = build_report([run])
    assert "<span title='/srv/models/Meta-Llama-3-8B-Instruct'>Meta-Llama-3-8B-Instruct</span>" in html
