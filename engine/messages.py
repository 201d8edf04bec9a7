"""Sentences the engine says to a person: `say()` Messages, English where made, translated where shown.
See docs/internals.md#messages-and-i18n."""
from __future__ import annotations

import functools
import gettext
import re
import string
from datetime import datetime
from io import BytesIO
from pathlib import Path
from typing import Any

from engine import particles
from engine.digits import FIGURES, significant

LOCALES = Path(__file__).resolve().parent.parent / "locales"
DOMAIN = "messages"


# Placeholders that quote what a person typed (an address, a model id): said shortened when long, so a
# 5,000-character URL does not become a 5,000-character sentence.
QUOTED = frozenset({"url", "plain", "model", "first"})
QUOTE_LIMIT = 120


def quoted(text: str) -> str:
    """`text` as a sentence quotes it: whole when short, else its start and its end around an ellipsis."""
    if len(text) <= QUOTE_LIMIT:
        return text
    return f"{text[: QUOTE_LIMIT * 2 // 3]}…{text[-(QUOTE_LIMIT // 4):]}"


class Message(str):
    """An English sentence that can be said again in another language."""

    template: str
    plural: str | None
    n: int | None
    values: dict

    def __new__(cls, template: str, plural: str | None = None, n: int | None = None, values: dict | None = None):
        values = {k: quoted(v) if k in QUOTED and type(v) is str else v for k, v in (values or {}).items()}
        chosen = plural if plural is not None and n != 1 else template
        if n is not None:
            values = {"n": n, **values}
        self = super().__new__(cls, chosen.format(**values) if values else chosen)
        self.template, self.plural, self.n, self.values = template, plural, n, values
        return self

    def __reduce__(self):  # pickles (jobs across processes) as what it is, not as a plain str
        return Message, (self.template, self.plural, self.n, self.values)


def say(template: str, /, **values) -> Message:
    """A sentence: `template` with its {placeholders} filled from `values` (format specs allowed)."""
    return Message(template, values=values)


def say_n(singular: str, plural: str, n: int, /, **values) -> Message:
    """A sentence whose wording follows a count `n` (also available as {n})."""
    return Message(singular, plural, n, values)


def mark(template: str) -> Message:
    """A fixed phrase defined in a table (a stage name, a preset); compares equal to its English."""
    return Message(template)


def seconds(x: float | str, lang: str, figures: int = FIGURES) -> str:
    """A time in seconds as `lang` writes its unit, one convention per language (4.1 s; 4.1초): a number in
    significant figures (0.040 s, never 0.0 s; engine.digits), or a plotly hover field such as "%{x:.2f}"."""
    return translate(say("{seconds} s", seconds=x if isinstance(x, str) else significant(x, figures)), lang)


def duration(x: float, lang: str) -> str:
    """A short time: milliseconds under a second (a name-like unit in both languages), else seconds."""
    return f"{significant(x * 1000)} ms" if x < 1 else seconds(x, lang)


def when(t: float, lang: str, part: str = "datetime") -> str:
    """An epoch time as `lang` writes it, in Babel's medium formats ("Dec 7, 2026, 8:52:44 AM"; "2026. 12. 7. 오전
    8:52:44"), or one part of that: "date", "time", "minute" (the time without its seconds). One format on a page:
    its table, chart and captions all say a time through here or i18n.when."""
    from babel import dates  # only where a time is shown (the CLI's --help imports none of this)

    d = datetime.fromtimestamp(t)
    if part == "date":
        return dates.format_date(d, "medium", locale=lang)
    if part in ("time", "minute"):
        return dates.format_time(d, "medium" if part == "time" else "short", locale=lang)
    return dates.format_datetime(d, "medium", locale=lang)


@functools.cache
def catalog(lang: str) -> gettext.NullTranslations:
    """The catalogue of `lang`: its compiled .mo (make run compiles it), else its .po compiled here in memory
    (`streamlit run app.py` alone, a fresh clone), else English with the reason kept for catalog_problem."""
    if lang == "en":
        return gettext.NullTranslations()
    mo, po = (LOCALES / lang / "LC_MESSAGES" / f"{DOMAIN}{ext}" for ext in (".mo", ".po"))
    try:
        if mo.exists() and (not po.exists() or mo.stat().st_mtime >= po.stat().st_mtime):
            with mo.open("rb") as f:
                return gettext.GNUTranslations(f)
        from babel.messages.mofile import write_mo  # only where no compiled catalogue is current
        from babel.messages.pofile import read_po

        with po.open("rb") as f:
            compiled = BytesIO()
            write_mo(compiled, read_po(f, locale=lang))
        compiled.seek(0)
        return gettext.GNUTranslations(compiled)
    except (OSError, ValueError, ImportError) as e:  # missing, unreadable or malformed: English, and why
        _PROBLEMS[lang] = say("The {lang} translations could not be read ({why}): the app shows English. Run "
                              "`make run` (it compiles them), or check {path}.", lang=lang,
                              why=str(e) or type(e).__name__,
                              path=str(po))
        return gettext.NullTranslations()


_PROBLEMS: dict[str, "Message"] = {}


def catalog_problem(lang: str) -> "Message | None":
    """Why `lang` shows English, when its catalogue could not be read (None when it could)."""
    catalog(lang)
    return _PROBLEMS.get(lang)


def filled(template: str, values: dict, lang: str) -> str:
    """A translated template with its values; in Korean each particle in the form the word before it takes
    (engine.particles: "0.84 GB가", never "0.84 GB이")."""
    if lang == "ko":
        return particles.fill(template, values) if values else particles.resolve(template)
    return template.format(**values) if values else template


def translate(text: object, lang: str) -> str:
    """`text` in `lang`: a Message (or an exception carrying one) said again from its template; a plain
    string that is itself a fixed phrase of the catalogue (a stage or cause read back from the history)
    translated; any other text as it is (data, a log line, a model's name)."""
    if isinstance(text, BaseException):
        text = text.args[0] if len(text.args) == 1 and isinstance(text.args[0], Message) else str(text)
    if lang == "en" or not text:
        return str(text)
    cat = catalog(lang)
    if not isinstance(text, Message):
        return filled(cat.gettext(str(text)), {}, lang)
    try:
        values = {k: translate(v, lang) if isinstance(v, Message) else v for k, v in text.values.items()}
        if text.plural is not None and text.n is not None:  # a plural always has its count (say_n, from_json)
            return filled(cat.ngettext(text.template, text.plural, text.n), values, lang)
        return filled(cat.gettext(text.template), values, lang)
    except Exception:  # noqa: BLE001 - a translation that cannot be filled in: the English, never a traceback
        return str(text)


# -- kept with what it names ----------------------------------------------------------------------
# A run's label is a Message when it is made ("10 requests at once, 64 tokens"); the history stores
# its template and values beside the English so the label is said in the viewer's language when read
# back. Stored data may come from an imported file: only simple {name} fields and short format specs
# are accepted (no attribute or index lookups, no huge widths), and the rebuilt English must be the
# stored English.
_FIELD = re.compile(r"[A-Za-z_]\w*")
_SPEC = re.compile(r"[<>^]?,?(\.\d)?[dfg%]?")


def to_json(m: Message) -> dict | None:
    """`m` as plain JSON, to be said again after it was stored; None when a value is not plain data."""
    values: dict[str, Any] = {}
    for k, v in m.values.items():
        if isinstance(v, Message):
            if (v := to_json(v)) is None:
                return None
            v = {"said": v}
        elif v is not None and not isinstance(v, (str, int, float, bool)):
            return None
        values[k] = v
    return {"template": m.template, "plural": m.plural, "n": m.n, "values": values}


def from_json(d: Any, english: str | None = None) -> Message | None:
    """The Message `to_json` stored, if it is well formed (and says `english` when given); else None."""
    try:
        templates = [d["template"]] + ([d["plural"]] if d.get("plural") is not None else [])
        if (not all(isinstance(t, str) and len(t) <= 1000 and _safe(t) for t in templates)
                or not isinstance(d["values"], dict)):
            return None
        n = d.get("n")
        if d.get("plural") is not None and (type(n) is not int or d["values"].get("n") != n):
            return None  # a plural needs its count (gettext's plural rule takes an int)
        values = {}
        for k, v in d["values"].items():
            if isinstance(v, dict):
                v = from_json(v.get("said"))
                if v is None:
                    return None
            values[k] = v
        m = Message(d["template"], d.get("plural"), n if type(n) is int else None, values)
    except Exception:  # noqa: BLE001 - stored or imported data: anything malformed is simply not rebuilt
        return None
    return m if english is None or str(m) == english else None


def _safe(template: str) -> bool:
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return False
    return all(_FIELD.fullmatch(name) and not conv and _SPEC.fullmatch(spec or "") for name, spec, conv in fields)
