"""Shared-prefix workloads: prefix repetition (N distinct prefixes of a chosen length, each request's
own suffix after it, as `vllm bench serve --dataset-name prefix_repetition`) and the random workload's shared prefix
(--random-prefix-len): lengths counted with the model's tokenizer, the prefixes really shared, a seed that makes the
same prompts again, the record and the one sentence for each bad setting."""
from __future__ import annotations

from collections import Counter

import pytest

from engine.measure.load.spec import LoadSpec
from engine.measure.judge import prefix
from engine.measure.workloads import kinds, lengths, prefixes, seeds, tokens
from engine.measure.workloads.base import WorkloadError
from tests.cli_spec import load_of
from tests.said import said, tree, values

from tests.conftest import MODELS


@pytest.fixture(scope="module")
def tok():
    from engine.serving import models

    return tokens.for_model(models.embedded(MODELS).path)


def _ids(tok, text):
    return tok.tokenizer.encode(text, add_special_tokens=False)


def test_prefix_repetition_shares_k_prefixes_of_exactly_their_length(tok):
    plan = kinds.plan_of({"kind": "prefix-repetition", "n": 12, "prefix_len": 40, "suffix_len": 24,
                          "num_prefixes": 3, "output_len": 16, "seed": 5}, tok)
    assert len(plan.prompts) == 12 and plan.input_tokens == [64] * 12  # every prompt prefix + suffix, exactly
    heads = Counter(tuple(_ids(tok, p)[:40]) for p in plan.prompts)
    assert sorted(heads.values()) == [4, 4, 4]  # three prefixes, each the first 40 tokens of four requests
    assert len({tuple(_ids(tok, p)[40:]) for p in plan.prompts}) == 12  # every suffix its own
    assert plan.max_tokens_each == [16] * 12 and plan.output_tokens == [16] * 12
    order = [next(i for i, h in enumerate(heads) if tuple(_ids(tok, p)[:40]) == h) for p in plan.prompts]
    assert order != sorted(order)  # shuffled, as vLLM's: a prefix's requests not one after another
    s = plan.summary
    assert (s["kind"], s["sent"], s["seed"], s["prefix_len"], s["suffix_len"], s["num_prefixes"], s["output_len"]) == \
        ("prefix-repetition", 12, 5, 40, 24, 3, 16)
    assert s["cacheable_tokens"] == 9 * 40 and s["tokenizer"] == tok.source
    assert "up to 47%" in str(prefix.cacheable_said(s))  # 9 × 40 of 12 × 64 prompt tokens


def test_prefix_repetition_is_the_same_for_a_seed_and_other_for_another(tok):
    desc = {"kind": "prefix-repetition", "n": 6, "prefix_len": 16, "suffix_len": 8, "num_prefixes": 2,
            "output_len": 8}
    a, b, c = (kinds.plan_of({**desc, "seed": s}, tok) for s in (1, 1, 2))
    assert a.prompts == b.prompts and a.prompts != c.prompts
    assert not set(a.prompts) & set(c.prompts)


def test_a_requests_count_not_divisible_by_the_prefixes_sends_every_request(tok):
    plan = prefixes.plan(7, 8, 8, 3, 4, seed=0, tokens=tok)
    assert len(plan.prompts) == 7  # vLLM drops the remainder (6): every request asked for is sent
    assert sorted(Counter(tuple(_ids(tok, p)[:8]) for p in plan.prompts).values()) == [2, 2, 3]


@pytest.mark.parametrize("over, says", [
    ({"num_prefixes": 9}, "9 prefixes for 8 requests"),
    ({"num_prefixes": 0}, "0 prefixes for 8 requests"),
    ({"prefix_len": 0}, "The prefix length is a whole number of tokens from 1"),
    ({"suffix_len": -3}, "The suffix length is a whole number of tokens from 1"),
    ({"output_len": 2.5}, "The answer length is a whole number of tokens from 1"),
    ({"n": 0}, "A shared-prefix workload sends from 1 to"),
])
def test_a_bad_prefix_setting_is_one_sentence(over, says):
    desc = {"kind": "prefix-repetition", "n": 8, "prefix_len": 8, "suffix_len": 8, "num_prefixes": 2,
            "output_len": 8, **over}
    with pytest.raises(WorkloadError) as e:
        kinds.plan_of(desc)
    assert says in str(e.value) and str(e.value).count(". ") == 0 and "\n" not in str(e.value)


def test_the_random_workloads_prefix_is_shared_and_on_top_of_the_drawn_length(tok):
    plan = kinds.plan_of({"kind": "lengths", "n": 5, "input": {"kind": "uniform", "low": 10, "high": 30},
                          "output": {"kind": "fixed", "mean": 8}, "seed": 3, "prefix_len": 20}, tok)
    drawn = lengths.Lengths("uniform", low=10, high=30).draw(5, __import__("random").Random(3))
    assert plan.input_tokens == [20 + k for k in drawn]
    assert len({tuple(_ids(tok, p)[:20]) for p in plan.prompts}) == 1  # one prefix before every prompt
    assert len({tuple(_ids(tok, p)[20:25]) for p in plan.prompts}) == 5  # then each its own
    assert plan.summary["prefix_len"] == 20
    with pytest.raises(WorkloadError) as refused:
        kinds.plan_of({"kind": "lengths", "n": 5, "input": {"kind": "fixed", "mean": 8}, "prefix_len": -1})
    assert said(refused.value).template.startswith("The random prefix is a whole number of tokens from 0 to {limit:,}")
    assert values(refused.value)["v"] == -1


@pytest.mark.parametrize("desc", [
    {"kind": "prefix-repetition", "n": 6, "prefix_len": 16, "suffix_len": 8, "num_prefixes": 2, "output_len": 8},
    {"kind": "lengths", "n": 4, "input": {"kind": "fixed", "mean": 12}, "output": {"kind": "fixed", "mean": 8},
     "prefix_len": 16},
], ids=["prefix-repetition", "random prefix"])
def test_a_new_seed_makes_the_workload_again_alike_and_the_record_says_it(desc, tok):
    plan = kinds.plan_of({**desc, "seed": 1}, tok)
    spec = plan.apply(LoadSpec(base_url="http://x", model="m", prompts=["hi"]))
    assert spec.prompt_seed == 1
    again = seeds.reseed(spec, 2, tok)
    assert again.prompt_seed == 2 and again.workload["seed"] == 2 and again.prompts != spec.prompts
    assert again.prompts == kinds.plan_of({**desc, "seed": 2}, tok).prompts
    assert {k: v for k, v in again.workload.items() if k not in ("seed",)} == \
        {k: v for k, v in spec.workload.items() if k not in ("seed",)} or desc["kind"] == "lengths"
    assert again.max_tokens_each == spec.max_tokens_each


def test_the_cli_makes_the_shared_prefix_workload_the_page_makes():
    from engine.measure.workloads.defaults import workload_plan

    load = load_of("concurrent-10", "--prefix-len", "32", "--suffix-len", "8", "--num-prefixes", "2", "--output-len",
                 "6", "--num-prompts", "6", "--seed", "9")
    page = workload_plan({"kind": "prefix-repetition", "n": 6, "prefix_len": 32, "suffix_len": 8, "num_prefixes": 2,
                          "output_len": 6, "seed": 9}, models_dir=MODELS)
    assert load.prompts == page.prompts and load.max_tokens_each == [6] * 6 and load.prompt_seed == 9
    w = load.workload
    assert (w["kind"], w["prefix_len"], w["num_prefixes"], w["sent"]) == ("prefix-repetition", 32, 2, 6)
    own = load_of("prefix-repetition", "--num-prompts", "8")  # the catalogue's scenario, a new seed each run
    assert own.n == 8 and own.workload["prefix_len"] == 256 and own.prompt_seed is not None
    assert load_of("prefix-repetition").prompt_seed != own.prompt_seed
    rnd = load_of("random-512-64", "--random-prefix-len", "16", "--num-prompts", "3", "--seed", "1")
    assert rnd.workload["prefix_len"] == 16 and rnd.workload["input_tokens"]["min"] == 512 + 16
    from engine.measure.workloads.named import named

    shared = tree(named(w))
    assert shared["id"] == "{kind} · {name} · seed {seed}"
    assert (shared["kind"], shared["seed"]) == ({"id": "shared prefixes"}, 9)
    assert shared["name"]["id"].startswith("{k} shared prefixes of {p} tokens") and (
        shared["name"]["k"], shared["name"]["p"]) == (2, 32)
    after = tree(named(rnd.workload))["name"]
    assert after["id"] == "{lengths} after a shared prefix of {n} tokens" and after["n"] == 16


@pytest.mark.parametrize("argv, says", [
    (["concurrent-10", "--prefix-len", "0"], "--prefix-len is a whole number of tokens from 1"),
    (["concurrent-10", "--num-prefixes", "5", "--num-prompts", "4"], "5 prefixes for 4 requests"),
    (["concurrent-10", "--prefix-len", "8", "--output-len", "10-20"], "With shared prefixes, --output-len is one"),
    (["concurrent-10", "--input-len", "8", "--prefix-len", "8"], "--input-len and --prefix-len cannot go together"),
    (["concurrent-10", "--random-prefix-len", "8"], "--random-prefix-len puts a shared prefix before random"),
    (["concurrent-10", "--input-len", "8", "--random-prefix-len", "-1"], "--random-prefix-len is a whole number"),
    (["concurrent-10", "--random-prefix-len", "8", "--suffix-len", "8"], "cannot go together"),
    (["trace-tiny", "--trace", "x.jsonl", "--prefix-len", "8"], "--trace and --prefix-len cannot go together"),
])
def test_a_bad_shared_prefix_option_is_one_sentence(argv, says):
    from engine.errors import LabError

    with pytest.raises(LabError) as e:
        load_of(*argv)
    assert says in str(e.value) and "\n" not in str(e.value)
