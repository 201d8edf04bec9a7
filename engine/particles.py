"""Korean particles chosen by the final sound of what precedes them: "0.84 GB가", "하나씩은", "512로", "8000으로",
never "0.84 GB이" or "하나씩은(는)". A translation writes the particle after a placeholder as it would after any
noun, in either form ("{peak}가", "'{v}'는", "`--port {port}`로", "{len}이라"); `fill` fills the template and then
gives each particle right after a placeholder (a closing quote, backtick or bold mark between them allowed) the
form the value's last sound takes. How a value is heard: `final_sound`, its rule in docs/korean.md#particles."""
from __future__ import annotations

import re

# Each particle's two forms: (after a final consonant, after a vowel). 으로/로 takes 로 after ㄹ too. The copula's
# 이 drops after a vowel (이라/라, 이었/였, ...); its full form is right after a vowel too, so it is the one said
# when nothing can be heard.
FORMS = [("은", "는"), ("이", "가"), ("을", "를"), ("과", "와"), ("으로", "로"),
         ("이라", "라"), ("이었", "였"), ("이어야", "여야"), ("이며", "며"), ("이고", "고"), ("이면", "면"),
         ("이나", "나"), ("이란", "란")]
# what may follow a particle inside the same word ("{x}로는", "{x}과의", "{len}이라는", "{peak}였습니다")
_THEN = {"과": "(?:의|는|도|만)?", "으로": "(?:는|도|만|부터|서|써|의)?", "이라": "(?:는|고|서|면|도)?",
         "이었": "[가-힣]*", "이어야": "[가-힣]*"}
_COPULA = {c for c, v in FORMS if c == "이" + v}


def _spellings(c: str, v: str) -> list[str]:
    """Every way a translation writes the particle: either form, or both written out ("은(는)", "(으)로")."""
    if c == "으로":
        return [c, v, "(으)로", "으로(로)", "로(으로)"]
    if c in _COPULA:
        return [c, v, f"(이){v}"]
    return [c, v, f"{c}({v})", f"{v}({c})"]


_PAIR = {s: (c, v) for c, v in FORMS for s in _spellings(c, v)}
_CHOICES = [s for s in _PAIR if "(" in s]


def _token(spellings: list[str]) -> str:
    """A regex of a particle written one of these ways, with what may follow it in its word."""
    return "|".join(re.escape(s) + _THEN.get(_PAIR[s][0], "") for s in sorted(spellings, key=len, reverse=True))


_MARK = "\x1f"
_CLOSERS = "'\"`’”»*_"  # closing quotes, code and markdown: the particle takes the sound of the word inside them
_AFTER_PLACEHOLDER = re.compile(r"(\{[^{}]*\}[" + re.escape(_CLOSERS) + "]*)(" + _token(list(_PAIR)) + ")(?![가-힣])")
_MARKED = re.compile(_MARK + "(" + _token(list(_PAIR)) + ")")
_CHOICE = re.compile("(" + _token(_CHOICES) + ")")  # a written-out choice anywhere
_HEAD = re.compile("|".join(re.escape(s) for s in sorted(_PAIR, key=len, reverse=True)))
_SILENT = _CLOSERS + "]"

# digits as Korean reads them: (has a final consonant, it is ㄹ): 영 일 이 삼 사 오 육 칠 팔 구
_DIGIT = {"0": (True, False), "1": (True, True), "2": (False, False), "3": (True, False), "4": (False, False),
          "5": (False, False), "6": (True, False), "7": (True, True), "8": (True, True), "9": (False, False)}
# a round number ends in its place (십 백 천) or its group of four digits (만 억 조 경)
_GROUP = [(True, False), (True, False), (False, False), (True, False)]
# the names of the letters that end in a consonant: 엘 엠 엔 알 (the others in a vowel: 비, 에스, 에이치)
_LETTER = {"l": (True, True), "m": (True, False), "n": (True, False), "r": (True, True)}
_SIGN = {"%": (False, False), "×": (False, False), "°": (False, False)}  # 퍼센트, 배, 도
# words this app says whose Korean spelling ends otherwise than the rule: 랩, 웹, 잡, 탭, 타입, 템플릿, 스윕
_USAGE = {w: (True, False) for w in ("lab", "web", "job", "tab", "type", "dtype", "template", "sweep")}


def final_sound(text: str) -> tuple[bool, bool] | None:
    """(ends in a final consonant, that consonant is ㄹ) for the end of `text` as Korean reads it; None when
    nothing there can be heard."""
    end = len(text)
    while True:
        while end and (text[end - 1] in _SILENT or text[end - 1].isspace()):
            end -= 1
        if not end:
            return None
        if text[end - 1] != ")":
            break
        # an aside in brackets: the particle follows the word before it ("max-model-len(512)이"), else its inside
        opening = _opening(text, end - 1)
        end = opening if opening is not None and text[:opening].strip() else end - 1
    c = text[end - 1]
    if "가" <= c <= "힣":
        jong = (ord(c) - 0xAC00) % 28
        return jong != 0, jong == 8
    # each search finds at least the character c
    if c.isdigit() and (digits := re.search(r"\d[\d,]*(?:\.\d+)?$", text[:end])):
        return _number(digits.group(0).replace(",", ""))
    if c.isascii() and c.isalpha() and (word := re.search(r"[A-Za-z]+$", text[:end])):
        return _latin(word.group(0))
    return _SIGN.get(c)


def _opening(text: str, close: int) -> int | None:
    """Where the bracket closed at `close` opens, if it does."""
    depth = 0
    for i in range(close, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return None


def _number(number: str) -> tuple[bool, bool]:
    """A number as Korean reads it: its last digit (0.84: 사; 512: 이; 7: 칠), or after its round zeros the
    place or group that ends it (10 십, 300 삼백, 2000 이천, 10000 만, 10^8 억, 10^12 조)."""
    zeros = len(number) - len(number.rstrip("0"))
    if "." in number or zeros in (0, len(number)):  # 0.84, 512, 0: the last digit
        return _DIGIT[number[-1]]
    return (True, False) if zeros < 4 else _GROUP[min(zeros // 4, len(_GROUP)) - 1]


def _latin(word: str) -> tuple[bool, bool]:
    """A word in Latin letters as its Korean transcription ends (외래어 표기법): an abbreviation or a unit (no two
    small letters in a row) by its last letter's name (GB 비, URL 엘, vLLM 엠, GiB 비); a word by its English
    ending: -ng ㅇ, -l ㄹ, -m ㅁ, -n ㄴ, a silent e after l/m/n likewise (file 파일, time 타임, engine 엔진), -ck and a
    k/t/p after one short vowel a final consonant (block 블록, chat 챗, step 스텝); every other ending a vowel (test
    테스트, load 로드, server 서버, cache 캐시); a few words as usage spells them (lab 랩, sweep 스윕, template
    템플릿)."""
    lower = word.lower()
    if lower in _USAGE:
        return _USAGE[lower]
    if not re.search("[a-z]{2}", word):  # no two small letters in a row: GB, vLLM, GiB, kWh, LoRA
        return _LETTER.get(lower[-1], (False, False))
    if lower.endswith("ng"):
        return True, False
    if lower[-1] == "e" and len(lower) >= 3 and lower[-2] in "lmn":
        return _LETTER[lower[-2]]
    if lower[-1] in "lmn":
        return _LETTER[lower[-1]]
    if lower.endswith("ck"):
        return True, False
    vowels = "aeiou"
    short = len(lower) >= 2 and lower[-2] in vowels and (len(lower) < 3 or lower[-3] not in vowels)
    return (True, False) if lower[-1] in "ktp" and short else (False, False)


def _pick(token: str, sound: tuple[bool, bool] | None) -> str:
    """The particle `token` begins with (written in either form or both) in the form `sound` takes, and the rest
    of its word as written."""
    found = _HEAD.match(token)
    assert found is not None  # _MARKED and _CHOICE capture only tokens that begin with a particle of _PAIR
    head = found.group(0)
    c, v = _PAIR[head]
    rest = token[len(head):]
    if sound is None:  # nothing to hear: the copula's full form (right either way), else both written out
        return (c if c in _COPULA else "(으)로" if c == "으로" else f"{c}({v})") + rest
    consonant, rieul = sound
    if c == "으로" and rieul:
        return v + rest
    return (c if consonant else v) + rest


def resolve(text: str) -> str:
    """Every marked particle and written-out choice in `text` in the form its preceding sound takes."""
    text = _MARKED.sub(lambda m: _pick(m.group(1), final_sound(m.string[:m.start()])), text)
    return _CHOICE.sub(lambda m: _pick(m.group(1), final_sound(m.string[:m.start()])), text)


def fill(template: str, values: dict) -> str:
    """A Korean template filled with `values`, each particle after a placeholder and each written-out choice
    in the form the value's last sound takes."""
    return resolve(_AFTER_PLACEHOLDER.sub(lambda m: m.group(1) + _MARK + m.group(2), template).format(**values))
