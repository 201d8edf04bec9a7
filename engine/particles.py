"""Korean particles chosen by the final sound of what precedes them: "0.84 GB가", "하나씩은", "512로", never
"0.84 GB이" or "하나씩은(는)". A translation writes the particle after a placeholder as it would after any noun
("{peak}이", "{run}은(는)"); `fill` fills the template and then picks each such particle's form from the
value's last sound (a Hangul syllable's final consonant, a number as Korean reads it, a Latin letter's name)."""
from __future__ import annotations

import re

# (form after a final consonant, form after a vowel); 으로/로 also takes 로 after ㄹ
PAIRS = {"은": ("은", "는"), "는": ("은", "는"), "이": ("이", "가"), "가": ("이", "가"), "을": ("을", "를"),
         "를": ("을", "를"), "과": ("과", "와"), "와": ("과", "와"), "으로": ("으로", "로"), "로": ("으로", "로")}
_MARK = "\x1f"
# a particle right after a placeholder, as a word ends: "{peak}이 ", "{n}은 안", "{share}로 줄여"
_AFTER_PLACEHOLDER = re.compile(r"(\{[^{}]*\})(으로|은|는|이|가|을|를|과|와|로)(?=[\s,.:;!?)\]'\"·]|$)")
# a written-out choice anywhere: "은(는)", "이(가)", "(으)로" and their reversed forms
_CHOICE = re.compile(r"(은\(는\)|는\(은\)|이\(가\)|가\(이\)|을\(를\)|를\(을\)|과\(와\)|와\(과\)"
                     r"|\(으\)로|으로\(로\)|로\(으로\))")
_MARKED = re.compile(_MARK + r"(으로|은|는|이|가|을|를|과|와|로)")
_SILENT = "'\"`’”»)]*_ "  # closing quotes and brackets, markdown: the sound is the word's before them
# digits as Korean reads them: (has a final consonant, it is ㄹ)
_DIGIT = {"0": (True, False), "1": (True, True), "2": (False, False), "3": (True, False), "4": (False, False),
          "5": (False, False), "6": (True, False), "7": (True, True), "8": (True, True), "9": (False, False)}
_LETTER_FINAL = {"l": (True, True), "m": (True, False), "n": (True, False), "r": (True, True)}  # 엘 엠 엔 알


def final_sound(text: str) -> tuple[bool, bool] | None:
    """(ends in a final consonant, that consonant is ㄹ) for the end of `text`; None when nothing sounds there."""
    end = len(text)
    while end and text[end - 1] in _SILENT:
        end -= 1
    if not end:
        return None
    c = text[end - 1]
    if "가" <= c <= "힣":
        jong = (ord(c) - 0xAC00) % 28
        return jong != 0, jong == 8
    if c.isdigit():
        number = re.search(r"[\d,]*\.?\d+$", text[:end]).group(0).replace(",", "")
        if "." in number:  # 0.84: 사
            return _DIGIT[number[-1]]
        zeros = len(number) - len(number.rstrip("0"))
        if zeros == 0 or number.strip("0") == "":  # 7: 칠; 0: 영
            return _DIGIT[number[-1]]
        return True, False  # 10 십, 100 백, 1000 천, 10000 만: all end in a consonant, none in ㄹ
    if c.isascii() and c.isalpha():
        word = re.search(r"[A-Za-z]+$", text[:end]).group(0)
        if word.isupper() or len(word) == 1:  # an abbreviation or a unit: the last letter's name (GB: 비)
            return _LETTER_FINAL.get(c.lower(), (False, False))
        if word.endswith("ng"):
            return True, False
        if c.lower() in "lmn":  # model: 모델, system: 시스템
            return _LETTER_FINAL[c.lower()]
        # chat: 챗, set: 셋; but test: 테스트, boot: 부트, load: 로드
        vowels = "aeiou"
        lower = word.lower()
        short = len(lower) >= 2 and lower[-2] in vowels and (len(lower) < 3 or lower[-3] not in vowels)
        return (True, False) if c.lower() in "ktp" and short else (False, False)
    if c == "%":  # 퍼센트
        return False, False
    return None


def _pick(particle: str, sound: tuple[bool, bool] | None) -> str:
    """`particle` (a bare one or a written-out choice) in the form `sound` takes."""
    first, second = PAIRS["으로" if "로" in particle else particle[0]]
    if sound is None:  # nothing to read the sound from: the written-out choice
        return f"{first}({second})" if first != "으로" else "(으)로"
    consonant, rieul = sound
    if first == "으로" and rieul:
        return "로"
    return first if consonant else second


def resolve(text: str) -> str:
    """Every marked particle and written-out choice in `text` in the form its preceding sound takes."""
    text = _MARKED.sub(lambda m: _pick(m.group(1), final_sound(m.string[:m.start()])), text)
    return _CHOICE.sub(lambda m: _pick(m.group(1), final_sound(m.string[:m.start()])), text)


def fill(template: str, values: dict) -> str:
    """A Korean template filled with `values`, each particle after a placeholder and each written-out choice
    in the form the value's last sound takes."""
    return resolve(_AFTER_PLACEHOLDER.sub(lambda m: m.group(1) + _MARK + m.group(2), template).format(**values))
