"""Reading what the engine said by meaning, not by its English wording: a sentence's message id (the template
the catalogue knows it by) and the values it was filled with. A test about numbers checks the numbers; a reworded
sentence breaks only the few tests that read rendered sentences in each language (tests/test_sentences_read.py).
Where only the rendered English is at hand (a CLI's output, a page's or a report's text), read() finds the sentence
of a catalogue id in it and gives the values it shows."""
from __future__ import annotations

import functools
import re
import string

from engine.messages import DOMAIN, LOCALES, Message


def said(text: object) -> Message:
    """The Message behind `text`: a Message, or an exception (a LabError) carrying one."""
    if isinstance(text, BaseException):
        text = text.args[0] if text.args else None
    assert isinstance(text, Message), f"{text!r} is not a sentence the engine said (say/mark)"
    return text


def values(text: object) -> dict:
    """The values a sentence was filled with (a sentence inside it as its own values)."""
    return {k: values(v) if isinstance(v, Message) and v.values else v for k, v in said(text).values.items()}


def ids(texts) -> list[str]:
    """The message ids of several sentences, in order."""
    return [said(t).template for t in texts]


def parts(text: object) -> dict[str, str]:
    """The ids of the sentences a composite one is made of, by placeholder (`{who} {what}: {todo}.`)."""
    return {k: v.template for k, v in said(text).values.items() if isinstance(v, Message)}


def tree(text: object) -> dict:
    """A sentence as its id and values all the way down: {"id": template, name: value or the tree of a sentence
    inside it}, for a test about what a composite sentence is made of (which phrase, with which numbers)."""
    m = said(text)
    return {"id": m.template, **{k: tree(v) if isinstance(v, Message) else v for k, v in m.values.items()}}


def within(text: object, template: str) -> list[dict]:
    """The trees of every sentence of id `template` inside `text` (itself, or a phrase at any depth), in order."""
    def walk(t: dict) -> list[dict]:
        inner = [x for v in t.values() if isinstance(v, dict) for x in walk(v)]
        return ([t] if t.get("id") == template else []) + inner
    return walk(tree(text))


def chain(text: object) -> list[dict]:
    """The trees of the parts of a list said as "{said}; {part}" one part at a time (a request's shape), in order."""
    t, out = tree(text), []
    while t["id"] == "{said}; {part}":
        out.insert(0, t["part"])
        t = t["said"]
    return [t, *out]


def read(template: str, text: str, plural: str | None = None) -> dict[str, str] | None:
    """The values a sentence of message id `template` was filled with where `text` shows it rendered in English (a
    CLI's output, a page's text), as the strings shown; None when no such sentence is there. For a test that can
    only read what a person reads: it still checks which sentence and which numbers, not the sentence's wording.
    `plural`: the id's plural form, when the count said was not one."""
    found = reads(template, text, plural)
    return found[0] if found else None


OPENING = r"[^\s<>.:;,](?:[^\n<>:;.]|\.(?=\w))*?"  # a field at a sentence's start: no ": " or ". " inside


def reads(template: str, text: str, plural: str | None = None) -> list[dict[str, str]]:
    """Every sentence of message id `template` in `text`, in order, as read() reads one."""
    return [m.groupdict() for m in pattern(template, plural).finditer(text)]


def pattern(template: str, plural: str | None = None) -> re.Pattern:
    """What read() looks for: a sentence of message id `template` rendered in English, its values as named groups.
    A browser test waits on it (on_page()) before it reads the sentence's values."""
    for t in (template, plural):
        assert t is None or t in _ids(), f"{t!r} is no message id of the catalogue (reworded? run make catalogue)"
    rx, names = "", set()
    fields = list(string.Formatter().parse(plural or template))
    for i, (literal, name, spec, _conv) in enumerate(fields):
        rx += re.escape(literal) + ("(?!\\w)" if literal.endswith(".") else "")  # a full stop, not 1.5's
        if name is None:
            continue
        if name in names:
            rx += f"(?P={name})"
        elif spec and spec[-1] in "dfg%" or "," in (spec or ""):  # a number, as its format writes it
            rx += f"(?P<{name}>[-+]?[\\d,]*\\.?\\d+(?:e[-+]?\\d+)?%?)"
        elif not rx:  # the sentence's opening: after the line's last tag, colon, semicolon or full stop
            rx += f"(?P<{name}>{OPENING})"  # (not from "error: " on)
        elif i == len(fields) - 1:  # its end: the rest of the line
            rx += f"(?P<{name}>[^\\n]*\\S)"
        else:  # may be empty: "ask for 512 or fewer{fix}." with no fix, the '' a user gave
            rx += f"(?P<{name}>[^\\n]*?)"
        names.add(name)
    return re.compile(rx)


def on_page(template: str, plural: str | None = None) -> re.Pattern:
    """pattern() as a browser's JavaScript reads it (no Python-only named groups), for Playwright's
    `get_by_text`: wait on the sentence with it, then read() its values from the element's text."""
    rx = re.sub(r"\(\?P=\w+\)", ".+?", pattern(template, plural).pattern)  # a value said twice
    return re.compile(re.sub(r"\(\?P<\w+>", "(?:", rx))


@functools.cache
def _ids() -> frozenset[str]:
    from babel.messages.pofile import read_po

    with (LOCALES / "ko" / "LC_MESSAGES" / f"{DOMAIN}.po").open("rb") as f:
        return frozenset(i for m in read_po(f) for i in (m.id if isinstance(m.id, tuple) else (m.id,)) if i)


def shown(template: str, texts, plural: str | None = None) -> list[dict[str, str]]:
    """The values of each sentence of message id `template` among `texts` (a page's infos, captions, lines), in
    order: [{}] for a fixed sentence shown once, [] when none is there."""
    return [v for t in texts if (v := read(template, t, plural)) is not None]
