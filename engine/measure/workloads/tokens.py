"""Counting and making tokens for a workload: the model's own tokenizer where one is given, else an estimate.
See docs/measuring.md#workloads."""
from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.measure.workloads.prompts import _WORDS
from engine.messages import Message, say
from engine.serving import models

CHARS_PER_TOKEN = 4  # English text with a BPE tokenizer: the usual rule of thumb


@dataclass(frozen=True)
class Tokens:
    """A token counter: `exact` with a model's tokenizer (`source` names its folder), else estimated."""

    source: str  # the model folder's name, or "" for the estimate
    tokenizer: Any = None

    @property
    def exact(self) -> bool:
        return self.tokenizer is not None

    def count(self, text: str) -> int:
        if self.tokenizer is None:
            return max(1, round(len(text) / CHARS_PER_TOKEN)) if text else 0
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def said(self) -> Message:
        """How the lengths were counted, for a caption and the run's record."""
        if self.exact:
            return say("counted with the tokenizer of {model}", model=self.source)
        return say("estimated at {n} characters a token (no tokenizer given)", n=CHARS_PER_TOKEN)

    def text_of(self, n: int, seed: int) -> str:
        """A prompt of exactly `n` tokens with the tokenizer (about n with the estimate), different for each
        seed from its first word on, so no two share a prefix in the cache by chance."""
        rng = random.Random(seed)
        if self.tokenizer is None:
            words, length = [], 0
            while length < n * CHARS_PER_TOKEN:
                w = rng.choice(_WORDS)
                words.append(w)
                length += len(w) + 1
            return " ".join(words)
        ids: list[int] = []
        while len(ids) < n + 8:
            ids += self.tokenizer.encode(" " + " ".join(rng.choice(_WORDS) for _ in range(n + 8)),
                                         add_special_tokens=False)
        cut = n
        for _ in range(8):  # decode, re-encode: a merge across the cut changes the count by a token or two
            text = self.tokenizer.decode(ids[:cut]).strip()
            got = self.count(text)
            if got == n:
                return text
            cut += n - got
        return text

    def after(self, head: str, n: int, seed: int) -> str:
        """`head`, a space, then `n` tokens of its own made from `seed`: a prompt of exactly count(head) + n tokens
        with the tokenizer (a word after a space is often one token fewer than the same word opening a text, so
        text_of's prompt after a head can be a token short), about that with the estimate. The head's tokens are the
        same in every prompt it opens: a BPE merge never crosses the space."""
        if self.tokenizer is None:
            return f"{head} {self.text_of(n, seed)}"
        rng, base = random.Random(seed), self.count(head)
        ids: list[int] = []
        while len(ids) < n + 8:
            ids += self.tokenizer.encode(" " + " ".join(rng.choice(_WORDS) for _ in range(n + 8)),
                                         add_special_tokens=False)
        cut = n
        for _ in range(8):  # as text_of: decode, count the whole, move the cut by what it missed
            text = head + self.tokenizer.decode(ids[:cut]).rstrip()
            got = self.count(text) - base
            if got == n:
                break
            cut += n - got
        return text

    def cut(self, text: str, n: int) -> str:
        """The first `n` tokens of `text` (about n with the estimate), `text` itself when it is no longer."""
        if self.tokenizer is None:
            return text[: n * CHARS_PER_TOKEN]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) <= n:
            return text
        k = n
        for _ in range(8):  # as text_of: a merge across the cut can change the count after decoding
            out = self.tokenizer.decode(ids[:k])
            got = self.count(out)
            if got == n:
                break
            k += n - got
        return out


def estimated() -> Tokens:
    return Tokens("")


class _Fast:
    """A folder's tokenizer.json through the `tokenizers` library alone, as encode/decode of transformers' fast
    tokenizer say it (tests/test_tokens.py holds them equal): importing transformers (and torch behind it) cost
    every `engine run` ~5 s of CPU and ~450 MB before its first request."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer  # what transformers' fast tokenizers run on; only a workload needs it

        self._tok = Tokenizer.from_file(str(path))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


def _plain(folder: Path) -> bool:
    """Whether transformers would read the folder's tokenizer.json as it is: no clean-up of spaces on decoding
    (" ." made ".") asked for by its tokenizer_config.json."""
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        config = {}
    return (folder / "tokenizer.json").is_file() and not (isinstance(config, dict)
                                                          and config.get("clean_up_tokenization_spaces"))


@functools.lru_cache(maxsize=4)
def _load(folder: str) -> Any:
    if _plain(Path(folder)):
        return _Fast(Path(folder) / "tokenizer.json")
    # the class's own module, not `from transformers import AutoTokenizer`: under `streamlit run` transformers'
    # lazy top-level module did not list it (ImportError), while the module it lives in imports as usual
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def for_model(folder: str | Path | None) -> Tokens:
    """The tokenizer of a local model folder (the served model's: models.embedded_dir(Settings.models) for the
    embedded default); the estimate when `folder` is None. ConfigError when the folder has no tokenizer."""
    if folder is None:
        return estimated()
    path = Path(folder)
    try:
        return Tokens(path.name, _load(str(path)))
    except Exception as e:  # noqa: BLE001 - any reason a folder has no usable tokenizer: one sentence
        raise ConfigError(say("The model folder {path} has no tokenizer that could be read ({why}): give the "
                              "folder of the model the server runs.", path=str(path),
                              why=type(e).__name__)) from None


def embedded(models_dir: Path | None) -> Tokens:
    """The embedded default model's tokenizer when it is prepared in `models_dir` (the converted models' folder:
    Settings.models), else the estimate (none given too)."""
    if models_dir is None:
        return estimated()
    folder = models.embedded_dir(models_dir)
    return for_model(folder) if (folder / "tokenizer_config.json").exists() else estimated()
