"""The guided lab: the seed notebook's steps in its order (`steps`), one presenter session for the
room (`session.Guide`, reached as `Lab.guide`), and its findings with this lab's numbers (`findings`)."""
from engine.guide.findings import (Finding, Row, findings, memory_returned, naive_pace, naive_would_take, numbers,
                                   tuning_said)
from engine.guide.session import Guide, State, guide_path
from engine.guide.steps import (LAB_FLAGS, SCALES, SEED, SEED_FILE, STEP_IDS, STEPS, TUNED_FLAGS, WHICH_ENGINE,
                                SeedNumber, Step, seed_text, step, tokens_for, value_text)

__all__ = ["Finding", "Guide", "LAB_FLAGS", "Row", "SCALES", "SEED", "SEED_FILE", "STEPS", "STEP_IDS", "SeedNumber",
           "State", "Step", "TUNED_FLAGS", "WHICH_ENGINE", "findings", "guide_path", "memory_returned", "naive_pace",
           "naive_would_take", "numbers", "seed_text", "step", "tokens_for", "tuning_said", "value_text"]
