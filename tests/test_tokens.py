"""A workload's tokenizer (engine/measure/workloads/tokens.py): the folder's tokenizer.json read by the `tokenizers`
library alone says what transformers' tokenizer says, and a command that makes prompts never imports transformers."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.measure.workloads import tokens
from engine.measure.workloads.prompts import _WORDS
from engine.serving import models

from tests.conftest import MODELS

ROOT = Path(__file__).resolve().parent.parent
SHAPE_ONLY = MODELS / "llama3-8b-shape-only"  # Llama 3's tokenizer, where the shape-only model is made


def _texts() -> list[str]:
    rng = random.Random(0)
    return ([" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 60))) for _ in range(60)]
            + ["  two leading spaces", "tab\there", "Hello , world . it 's", "<|im_start|>user hi<|im_end|>",
               "한국어 문장입니다. 서빙 실험", "emoji 🙂 and\u2028sep", " .",
               (ROOT / "examples" / "workloads" / "fixed-text.txt").read_text()[:2000]])


@pytest.mark.parametrize("folder", [models.embedded_dir(MODELS), SHAPE_ONLY], ids=["smollm2", "llama3"])
def test_the_fast_tokenizer_encodes_and_decodes_as_transformers_does(folder):
    if folder == SHAPE_ONLY and not (folder / "tokenizer.json").is_file():
        pytest.skip("needs the shape-only model prepared (scripts/setup.sh prepares it)")
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    ours, theirs = tokens.for_model(folder).tokenizer, AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert type(ours).__name__ == "_Fast"
    for text in _texts():
        ids = theirs.encode(text, add_special_tokens=False)
        assert ours.encode(text, add_special_tokens=False) == ids, text
        for k in {len(ids), len(ids) // 2, 3}:
            assert ours.decode(ids[:k]) == theirs.decode(ids[:k]), text


def test_a_tokenizer_that_cleans_up_spaces_is_read_by_transformers(tmp_path):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((models.embedded_dir(MODELS) / name).read_bytes())
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))
    assert type(tokens.for_model(tmp_path).tokenizer).__name__ != "_Fast"


def test_making_prompts_of_exact_lengths_never_imports_transformers_or_torch():
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from engine.measure.workloads import tokens\n"
            "t = tokens.embedded(Path(sys.argv[1]))\n"
            "assert t.exact and t.count(t.text_of(40, seed=1)) == 40\n"
            "print(sorted(m for m in ('transformers', 'torch') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code, str(MODELS)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
