"""Reading what the engine said by meaning, not by its English wording: a sentence's message id (the template
the catalogue knows it by) and the values it was filled with. A test about numbers checks the numbers; a reworded
sentence breaks only the few tests that read rendered sentences in each language (tests/test_sentences_read.py)."""
from __future__ import annotations

from engine.messages import Message


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
