"""Two languages: the catalogue follows the code, every string shown has a Korean
translation, and a translation keeps the placeholders and code the English has."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parent.parent
POT = ROOT / "locales" / "messages.pot"
KO = ROOT / "locales" / "ko" / "LC_MESSAGES" / "messages.po"
# As `make catalogue` runs it: the UI's _() N_() ngettext() and the engine's say() say_n() mark().
EXTRACT = ["-F", "babel.cfg", "-k", "_", "-k", "N_", "-k", "ngettext:1,2", "-k", "say", "-k", "say_n:1,2", "-k", "mark",
           "--no-location", "--omit-header"]


def ids(path: Path) -> set[str]:
    with open(path, "rb") as f:
        return {m.id if isinstance(m.id, str) else m.id[0] for m in read_po(f) if m.id}


def test_the_catalogue_follows_the_code(tmp_path):
    """A string wrapped in _() (or an engine sentence made with say()) that is missing from locales/, or one
    left there after the code dropped it: run `make catalogue` and translate what it added."""
    fresh = tmp_path / "messages.pot"
    subprocess.run([sys.executable, "-m", "babel.messages.frontend", "extract", *EXTRACT, "-o", str(fresh), "."],
                   cwd=ROOT, check=True, capture_output=True)
    code = ids(fresh)
    assert code == ids(POT), sorted(code ^ ids(POT))
    assert code == ids(KO), sorted(code ^ ids(KO))


def _placeholders(text: str) -> list[str]:
    return sorted(re.findall(r"\{[^{}]*\}|`[^`]*`", text))


@pytest.mark.parametrize("message", [m for m in read_po(open(KO, "rb")) if m.id], ids=lambda m: str(m.id)[:40])
def test_every_string_has_korean_that_keeps_its_placeholders(message):
    singular = message.id if isinstance(message.id, str) else message.id[0]
    strings = message.string if isinstance(message.string, tuple) else (message.string,)
    assert all(strings) and not message.fuzzy, f"no reviewed Korean for {singular!r}"
    for s in strings:
        assert _placeholders(s) == _placeholders(singular), f"{singular!r} -> {s!r}"
