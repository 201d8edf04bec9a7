"""Two languages: the catalogue follows the code, every string shown has a Korean
translation, and a translation keeps the placeholders and code the English has."""
import re
import subprocess
import sys
from pathlib import Path

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


def problems(path: Path) -> list[str]:
    """Every entry of a catalogue without reviewed Korean (none, or fuzzy) or whose Korean lost or added a
    placeholder or a piece of `code`, one line each."""
    out = []
    with open(path, "rb") as f:
        for message in read_po(f):
            if not message.id:
                continue
            singular = message.id if isinstance(message.id, str) else message.id[0]
            strings = message.string if isinstance(message.string, tuple) else (message.string,)
            if not all(strings) or message.fuzzy:
                out.append(f"no reviewed Korean: {singular!r}")
            out += [f"placeholders differ: {singular!r} -> {s!r}" for s in strings
                    if s and _placeholders(s) != _placeholders(singular)]
    return out


def test_every_string_has_korean_that_keeps_its_placeholders():
    """The whole catalogue at once: the failure lists every entry to translate or mend."""
    assert not problems(KO), "\n".join(problems(KO))


def test_a_broken_catalogue_is_listed_entry_by_entry(tmp_path):
    po = tmp_path / "messages.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
                  '"Plural-Forms: nplurals=1; plural=0;\\n"\n\n'
                  'msgid "Fine {n}"\nmsgstr "좋음 {n}"\n\n'
                  'msgid "Untranslated"\nmsgstr ""\n\n'
                  '#, fuzzy\nmsgid "Guessed"\nmsgstr "추측"\n\n'
                  'msgid "Run `make run` for {n} runs"\nmsgstr "{count}번 실행"\n\n'
                  'msgid "{n} run"\nmsgid_plural "{n} runs"\nmsgstr[0] "{n}개 실행"\n', encoding="utf-8")
    assert problems(po) == ["no reviewed Korean: 'Untranslated'", "no reviewed Korean: 'Guessed'",
                            "placeholders differ: 'Run `make run` for {n} runs' -> '{count}번 실행'"]
