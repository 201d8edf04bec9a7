"""The fixed-text workload (as vllm bench serve's sonnet without copied text): prompts of exactly
their length cut from the shipped text the project wrote, its opening shared by every prompt, seeded, recorded,
and one sentence for each bad setting."""
from __future__ import annotations

import pytest

from engine.measure.judge import prefix
from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import fixed_text, kinds, seeds, tokens
from engine.measure.workloads.base import WorkloadError
from engine.measure.workloads.named import named
from tests.cli_spec import load_of
from tests.conftest import MODELS, ROOT
from tests.said import tree

TEXT = ROOT / "examples" / "workloads" / "fixed-text.txt"


@pytest.fixture(scope="module")
def tok():
    from engine.serving import models

    return tokens.for_model(models.embedded(MODELS).path)


def test_prompts_are_cut_from_the_text_exactly_their_length_its_opening_shared(tok):
    plan = kinds.plan_of({"kind": "fixed-text", "n": 6, "input_len": 120, "prefix_len": 50, "output_len": 10,
                          "seed": 4}, tok)
    assert plan.input_tokens == [120] * 6 and plan.max_tokens_each == [10] * 6
    ids = [tok.tokenizer.encode(p, add_special_tokens=False) for p in plan.prompts]
    assert len({tuple(i[:50]) for i in ids}) == 1  # the text's first 50 tokens open every prompt
    assert len({tuple(i[50:]) for i in ids}) == 6  # then lines drawn for each
    in_order = [line.strip() for line in TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = set(in_order)
    head = tok.cut("\n".join(in_order), 50) + "\n"  # the text's own opening, cut at 50 tokens
    assert in_order[0] in head and all(p.startswith(head) for p in plan.prompts)
    # every whole line after the opening is one of the text's (the last one cut at the length)
    assert all(line in lines for p in plan.prompts for line in p[len(head):].split("\n")[:-1])
    s = plan.summary
    assert (s["kind"], s["file"], s["sent"], s["seed"], s["input_len"], s["prefix_len"], s["output_len"]) == \
        ("fixed-text", "fixed-text.txt", 6, 4, 120, 50, 10)
    assert s["lines"] == len(lines) and len(s["sha256"]) == 64
    assert tree(named(s)) == {"id": "{kind} · {name} · seed {seed}", "kind": {"id": "fixed text"}, "seed": 4,
                              "name": {"id": "prompts of {n} tokens from a fixed text, the first {p} shared",
                                       "n": 120, "p": 50}}
    assert "up to 35%" in str(prefix.cacheable_said(s))  # 5 × 50 of 6 × 120 tokens


def test_the_same_seed_makes_the_same_prompts_and_a_new_seed_others(tok):
    desc = {"kind": "fixed-text", "n": 4, "input_len": 60, "prefix_len": 0, "output_len": 8}
    a, b, c = (kinds.plan_of({**desc, "seed": s}, tok) for s in (1, 1, 2))
    assert a.prompts == b.prompts and a.prompts != c.prompts and a.input_tokens == [60] * 4
    spec = a.apply(LoadSpec(base_url="http://x", model="m", prompts=["hi"]))
    again = seeds.reseed(spec, 2, tok)
    assert again.prompts == c.prompts and again.workload["seed"] == again.prompt_seed == 2


@pytest.mark.parametrize("over, says", [
    ({"prefix_len": 60}, "The shared opening is a whole number of tokens from 0 to one less than the prompt's 60"),
    ({"input_len": 0}, "The prompt length is a whole number of tokens from 1"),
    ({"output_len": -1}, "The answer length is a whole number of tokens from 1"),
    ({"n": 0}, "A fixed-text workload sends from 1 to"),
])
def test_a_bad_fixed_text_setting_is_one_sentence(over, says):
    with pytest.raises(WorkloadError) as e:
        kinds.plan_of({"kind": "fixed-text", "n": 4, "input_len": 60, "prefix_len": 10, "output_len": 8, **over})
    assert says in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(WorkloadError, match="holds no text"):
        fixed_text.plan(b"\n  \n", "empty.txt", 2)


def test_the_shipped_text_says_where_it_comes_from():
    readme = (TEXT.parent / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if "`fixed-text.txt`" in line)
    assert "written for this project" in row and "CC0-1.0" in row


def test_the_cli_sends_the_fixed_text_the_page_sends():
    from engine.measure.workloads.defaults import workload_plan

    load = load_of("concurrent-10", "--fixed-text", "--input-len", "80", "--prefix-len", "20", "--output-len", "6",
                 "--num-prompts", "3", "--seed", "7")
    page = workload_plan({"kind": "fixed-text", "n": 3, "input_len": 80, "prefix_len": 20, "output_len": 6, "seed": 7},
                         models_dir=MODELS)
    assert load.prompts == page.prompts and load.max_tokens_each == [6] * 3 and load.prompt_seed == 7
    own = load_of("fixed-text", "--num-prompts", "2")  # the catalogue's scenario: its lengths, a new seed each run
    assert own.n == 2 and own.workload["input_len"] == 256 and own.prompt_seed is not None
    assert load_of("fixed-text", "--input-len", "64", "--num-prompts", "2").workload["input_len"] == 64


@pytest.mark.parametrize("argv, says", [
    (["concurrent-10", "--fixed-text", "--input-len", "10-20"], "With --fixed-text, --input-len is one number"),
    (["concurrent-10", "--fixed-text", "--output-len", "4:1"], "With --fixed-text, --output-len is one number"),
    (["concurrent-10", "--fixed-text", "--num-prefixes", "2"], "--fixed-text and --num-prefixes cannot go together"),
    (["dataset-chat", "--dataset", "x.jsonl", "--fixed-text"], "--dataset and --fixed-text cannot go together"),
    (["concurrent-10", "--fixed-text", "--input-len", "30", "--prefix-len", "30"], "The shared opening is a whole"),
])
def test_a_bad_fixed_text_option_is_one_sentence(argv, says):
    from engine.errors import LabError

    with pytest.raises(LabError) as e:
        load_of(*argv)
    assert says in str(e.value) and "\n" not in str(e.value)
