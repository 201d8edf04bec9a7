"""The guided lab's catalogue: the seed notebook's steps in its order, what each runs, and the notebook's own
printed numbers as data (`SeedNumber`)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.digits import change, significant
from engine.errors import LabError
from engine.messages import Message, mark, say


SEED = mark("the lab notebook's run on its GPU")  # where every SeedNumber comes from
SEED_FILE = "000_aa4b3268376b761a"  # the notebook (shared/seed/), for a reader who checks
SCALES = (0.1, 0.25, 0.5, 1.0)  # token budgets as a share of the lab's: a busy CPU may take a tenth
SCALE_NAMES = {1.0: mark("the lab's"), 0.5: mark("half"), 0.25: mark("a quarter"), 0.1: mark("a tenth")}
# The short vLLM steps run this many times (each a run of its own), so that a finding's verdict has each side's
# noise (engine.measure.judge.verdict); the naive baseline runs once (its worker loads the model each time)
REPEATS = 3
REPEATED = ("test-query", "sequential", "concurrent", "tuning", "streaming")


@dataclass(frozen=True)
class SeedNumber:
    """One number the notebook printed, with its unit ("s", "ms", "tok/s", "GB", "x", "%", "tokens")."""

    label: Message
    value: float
    unit: str


@dataclass(frozen=True)
class Step:
    id: str  # an identifier (the state file's): never translated
    title: Message
    narrative: Message  # the notebook's point, two sentences at most
    more: Message  # the longer explanation, folded away on the page
    notice: Message  # the one sentence of what to look at
    button: Message
    scenario: str | None = None  # the workload it runs (measure/scenarios.py), None: no measurement
    tokens: int | None = None  # the lab's token budget per answer
    seed: tuple[SeedNumber, ...] = ()
    # requests sent first and not counted: a server's first batch of a new size pays one-off start-up work
    # (ten 150-token answers: 4.5 s cold against 0.86 s warm on an H200, docs/results-h200.md), not the lesson
    warmup: int = 0

    def told(self, text: Message, scale: float) -> Message:
        """One of its texts (narrative, more, notice) with the token budget it runs at this scale: a text that
        names its budget says {tokens}, so what the page says is what the button sends."""
        if "{tokens}" not in text.template:
            return text
        return Message(text.template, values={"tokens": tokens_for(self, scale)})

    @property
    def number(self) -> int:
        return next(i for i, s in enumerate(STEPS, 1) if s.id == self.id)


STEPS: tuple[Step, ...] = (
    Step("naive", mark("Naive inference"),
         say("First the way experiments usually start: load the model with transformers and call `generate()` for "
             "the lab's 5 prompts, one after another. This is the baseline vLLM has to beat."),
         say("Naive inference means no serving optimisation: one request at a time, no batching, no cache "
             "management, no fused kernels. Here it runs in a worker process of its own, so that its memory really "
             "goes back when it ends (the notebook has to clear Jupyter's output history for that)."),
         say("Each answer takes seconds, and the five add up: the total is what the fifth user waited."),
         mark("Run naive inference on the 5 prompts"), "naive-5", 200,
         (SeedNumber(mark("mean latency"), 3.7, "s"), SeedNumber(mark("total for 5 (sequential)"), 18.5, "s"),
          SeedNumber(mark("decode speed"), 52, "tok/s"), SeedNumber(mark("GPU memory after loading"), 16.1, "GB"))),
    Step("free", mark("Free the memory"),
         say("vLLM needs the memory the naive model holds. In the notebook that means deleting the model and "
             "emptying the CUDA cache; here the naive worker's process has exited, so its memory is already back."),
         say("In Jupyter, `del model` is not enough: the output history (`Out[]`, `_`, `__`) can keep references "
             "alive, and PyTorch's caching allocator keeps memory reserved (the notebook shows 15.01 GB still "
             "reserved). A process that exits returns everything to the operating system, which is what this app "
             "does."),
         say("The worker's own memory: what it held at its peak, and nothing once its process exited."),
         mark("Check what was returned"), None, None,
         (SeedNumber(mark("allocated after cleanup"), 0.01, "GB"), SeedNumber(mark("still reserved"), 15.01, "GB"))),
    Step("start", mark("Start vLLM"),
         say("Start the vLLM server with the notebook's flags: dtype float16, max-model-len 2048, "
             "gpu-memory-utilization 0.85, port 9000. It serves an OpenAI-compatible API."),
         say("vLLM brings continuous batching (new requests join mid-generation), PagedAttention (the KV cache in "
             "pages, like an operating system's memory), optimised CUDA kernels and an OpenAI-compatible API. The "
             "notebook waits 30–60 s for Uvicorn to come up."),
         say("The startup stages: weights loaded, then the KV cache allocated, then the API answers."),
         mark("Start vLLM with the lab's flags"), None, None, ()),
    Step("test-query", mark("One test query"),
         say("One question through the OpenAI client, as the notebook asks it: \"What is the capital of Korea?\""),
         say("The same request any OpenAI client sends: only base_url changes. The notebook's answer came back in "
             "0.6 s."),
         say("One short answer, in well under the time of a naive one."),
         mark("Ask the test question"), "test-query", 200, (SeedNumber(mark("answer time"), 0.6, "s"),)),
    Step("sequential", mark("5 sequential via vLLM"),
         say("The same 5 prompts with the same token budget, one after another, now through vLLM."),
         say("Still one request at a time, so continuous batching has nothing to batch yet: the difference is "
             "vLLM's kernels and memory management alone."),
         say("Compare the bars pair by pair: the same prompt, naive against vLLM."),
         mark("Run the 5 prompts through vLLM"), "vllm-5-sequential", 200,
         (SeedNumber(mark("mean latency"), 3.2, "s"), SeedNumber(mark("speed-up over naive"), 1.2, "x"))),
    Step("concurrent", mark("10 concurrent"),
         say("Real traffic comes at once. Send 10 requests together: continuous batching decodes them side by side."),
         say("Traditional batching waits for a batch to fill and for its longest answer to end. Continuous batching "
             "lets a request start while others are mid-generation, so the hardware stays busy."),
         say("All ten end at about the same time: the wall time is close to one answer's, not ten."),
         mark("Send 10 requests at once"), "concurrent-10", 150,
         (SeedNumber(mark("wall time for 10"), 3.9, "s"), SeedNumber(mark("mean latency"), 3.6, "s"),
          SeedNumber(mark("throughput"), 354, "tok/s"), SeedNumber(mark("naive would take"), 50, "s")), warmup=10),
    Step("tuning", mark("Tuning"),
         mark("Restart vLLM with max-model-len 512 and gpu-memory-utilization 0.90, and send the 10 requests again "
              "with {tokens} tokens each."),
         mark("A shorter context caps how long a request may grow; a larger memory share gives the KV cache more room. "
              "The app runs the same {tokens}-token workload on both settings (2048 / 0.85, then 512 / 0.90), so the "
              "comparison is fair; the notebook sent 100 tokens and compared against its 150-token run."),
         say("Throughput and wall time side by side: whether the shorter context helped depends on whether the KV "
             "cache was the limit."),
         mark("Restart with 512 / 0.90 and compare"), "tuning", 100,
         (SeedNumber(mark("wall time (512 / 0.90)"), 3.2, "s"), SeedNumber(mark("throughput (512 / 0.90)"), 284,
                                                                          "tok/s"),
          SeedNumber(mark("throughput change"), -20, "%"))),
    Step("streaming", mark("Streaming and TTFT"),
         mark("Users expect words to appear at once. Stream a {tokens}-token answer to \"Explain PagedAttention in "
              "vLLM and why it matters for serving.\" and time the first token."),
         say("stream=True in the OpenAI API. The time to first token (TTFT) is what a chat user feels; without "
             "streaming they would see nothing until the whole answer is done."),
         say("The first token arrives long before the answer ends: that gap is what streaming saves."),
         mark("Stream the answer"), "stream-300", 300,
         (SeedNumber(mark("TTFT"), 166, "ms"), SeedNumber(mark("total time"), 5.2, "s"),
          SeedNumber(mark("tokens"), 300, "tokens"), SeedNumber(mark("token rate"), 58, "tok/s"))),
    Step("summary", mark("Summary"),
         say("The notebook's six findings, filled in with this lab's numbers, and which engine to use when."),
         say("Each finding is computed from the runs the steps above made; a step not run yet says so."),
         say("Download the report to keep the numbers and charts."),
         mark("Download the HTML report"), None, None, ()),
)
STEP_IDS = tuple(s.id for s in STEPS)

# The notebook's flags, step by step (its own words: the commands it prints)
LAB_FLAGS = {"dtype": "float16", "max_model_len": 2048, "gpu_memory_utilization": 0.85, "port": 9000}
TUNED_FLAGS = {"max_model_len": 512, "gpu_memory_utilization": 0.90}
WHICH_ENGINE = (
    say("vLLM: serving LLMs (most production LLM APIs run it behind a load balancer)."),
    say("Triton: serving several kinds of models in one system (LLMs, embedding models, rerankers)."),
    say("TensorRT-LLM: the last bit of speed, with an engine built for one GPU and model."),
)


def step(step_id: str) -> Step:
    try:
        return STEPS[STEP_IDS.index(step_id)]
    except ValueError:
        raise LabError(say("There is no guided step '{name}': pick one of {names}.", name=step_id,
                           names=", ".join(STEP_IDS))) from None


def repeats_for(s: Step) -> int:
    """How many times the step runs its workload."""
    return REPEATS if s.id in REPEATED else 1


def tokens_for(s: Step, scale: float) -> int | None:
    """A step's token budget at the session's scale (at least 16: a shorter answer measures little)."""
    return None if s.tokens is None else max(16, int(round(s.tokens * scale)))


def seed_text(n: SeedNumber) -> Message:
    """A SeedNumber as a short phrase in its unit, with the digits the notebook printed (said in the reader's
    language)."""
    return value_text(n.value, n.unit, f"{n.value:g}")


def value_text(v: float, unit: str, shown: str | None = None) -> Message:
    """A number in one of the SeedNumber units, said in the reader's language: a measurement in significant figures
    (0.40 tok/s, never 0 tok/s), or as `shown`."""
    n = shown or significant(v)
    if unit == "%":  # a change: +254 %, -0.030 % (never "-0%"), as the findings' sentences say it
        return say("{v} %", v=shown or change(1 + v / 100))
    return {"s": say("{v} s", v=n), "ms": say("{v} ms", v=n), "x": say("{v}×", v=n),
            "GB": say("{v} GB", v=n), "tok/s": say("{v} tok/s", v=n), "tokens": say("{v:.0f} tokens", v=v)}[unit]
