"""The guided lab: the seed notebook's steps in its order (`steps`), one presenter session for the
room (`session.Guide`, reached as `Lab.guide`), and its findings with this lab's numbers (`findings`)."""
from engine.guide.findings import (BUSY, NO_DIFFERENCE, UNDECIDED, Finding, Row, findings, naive_pace,
                                   naive_would_take, numbers, tuning_said)
from engine.guide.session import Guide, State, guide_path
from engine.guide.steps import (LAB_FLAGS, REPEATS, SCALES, SEED, SEED_FILE, STEP_IDS, STEPS, TUNED_FLAGS,
                                WHICH_ENGINE, SeedNumber, Step, repeats_for, seed_text, step, tokens_for, value_text)

__all__ = ["BUSY", "Finding", "findings", "Guide", "guide_path", "LAB_FLAGS", "naive_pace", "naive_would_take",
           "NO_DIFFERENCE", "numbers", "REPEATS", "repeats_for", "Row", "SCALES", "SEED", "SEED_FILE", "seed_text",
           "SeedNumber", "State", "step", "Step", "STEP_IDS", "STEPS", "tokens_for", "TUNED_FLAGS", "tuning_said",
           "UNDECIDED", "value_text", "WHICH_ENGINE"]
