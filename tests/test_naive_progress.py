"""The naive worker's progress says the run's own sizes (a static batch of 5 read "static
batch of 200: step 23/200", the warm-up's token count where the batch's size belongs). A real worker
on a tiny random-weight Llama, so it is quick on a CPU."""
from __future__ import annotations

import re

import pytest

from engine.measure.baseline.naive import run_naive
from engine.measure.baseline.protocol import NaiveSpec
from engine.measure.progress import Progress
from tests.test_naive import PROMPTS, model_dir, tiny_random_dir  # noqa: F401 - fixtures


class Stages(Progress):
    def __init__(self) -> None:
        self.stages: list[str] = []

    def on_stage(self, text):
        self.stages.append(str(text))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["static-batch", "sequential"])
def test_progress_names_the_prompts_not_the_warmup_tokens(tiny_random_dir, mode):  # noqa: F811
    obs = Stages()
    prompts = PROMPTS[:3]
    run_naive(NaiveSpec(model_path=str(tiny_random_dir), prompts=prompts, max_new_tokens=12, random_weights=True,
                        mode=mode, warmup=True), observer=obs)
    assert any(s.startswith("warming up, not measured") for s in obs.stages)  # the warm-up ran first
    if mode == "static-batch":
        sizes = {int(m.group(1)) for s in obs.stages if (m := re.match(r"static batch of (\d+)", s))}
        assert sizes == {len(prompts)}, obs.stages
    else:
        totals = {int(m.group(1)) for s in obs.stages if (m := re.match(r"request \d+/(\d+)", s))}
        assert totals == {len(prompts)}, obs.stages
