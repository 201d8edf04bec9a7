"""Korean particles by the final sound of the word or number before them: "0.84 GB가", "하나씩은",
"8000으로", never "0.84 GB이" or "하나씩은(는)"; through the catalogue as the pages and the report say them."""
from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from engine.messages import filled, say, translate
from engine.particles import fill, final_sound

KO = Path(__file__).resolve().parent.parent / "locales" / "ko" / "LC_MESSAGES" / "messages.po"
C, V, L = (True, False), (False, False), (True, True)  # a final consonant, a vowel, ㄹ


@pytest.mark.parametrize("word, sound", [
    # Hangul, and what a closing quote, bold or code mark hides
    ("하나씩", C), ("한꺼번에", V), ("서울", L), ("**4.0초**", V), ("'chat'", C),
    # numbers as Korean reads them: 일 이 삼 육 칠 십 백 천 만 억 조, a decimal by its last digit
    ("1", L), ("2", V), ("3", C), ("6", C), ("7", L), ("9", V), ("0", C), ("512", V), ("2048", L), ("10", C),
    ("100", C), ("8000", C), ("1,024", V), ("10000", C), ("300,000,000", C), ("2,000,000,000,000", V),
    ("0.84", V), ("0.5", V), ("1.50", C),
    # units: 기가바이트, 퍼센트, 밀리초, 초, 배
    ("0.84 GB", V), ("512 MB", V), ("1.5 GiB", V), ("10%", V), ("40 ms", V), ("4.1 s", V), ("35 tok/s", V),
    ("2.5×", V), ("3 min", C),
    # Latin: an abbreviation by its letters' names, a word by its English ending
    ("URL", L), ("vLLM", C), ("JSON", C), ("LoRA", V), ("GPU", V), ("model", L), ("system", C), ("streaming", C),
    ("engine", C), ("pipeline", C), ("file", L), ("name", C), ("block", C), ("target", C), ("step", C),
    ("test", V), ("prompt", V), ("load", V), ("server", V), ("cache", V), ("FlashInfer", V), ("Serving Lab", C),
    ("sweep", C), ("chat-template", C),
    ("meta-llama/Meta-Llama-3-8B-Instruct", V), ("facebook/opt-125m", C), ("float16", C), ("int8", L),
    # an aside in brackets: the word before it
    ("max-model-len(512)", C), ("동시 요청 10개(50%)", V), ("시스템 (전체 프로세스)", C), ("(전체 24 GB)", V)])
def test_the_final_sound(word, sound):
    assert final_sound(word) == sound


def test_nothing_to_hear():
    assert final_sound("") is None and final_sound("🙂") is None and final_sound("'…'") is None


def test_a_particle_after_a_placeholder_takes_the_values_sound():
    assert fill("{peak}이 돌아갔고", {"peak": "0.84 GB"}) == "0.84 GB가 돌아갔고"
    assert fill("{fast}은(는) 빨랐다", {"fast": "단순 추론, 하나씩"}) == "단순 추론, 하나씩은 빨랐다"
    assert fill("{fast}은(는) 빨랐다", {"fast": "vLLM, 한꺼번에"}) == "vLLM, 한꺼번에는 빨랐다"
    assert fill("--max-model-len {len}으로 실행", {"len": 512}) == "--max-model-len 512로 실행"
    assert fill("{n}(으)로", {"n": 7}) == "7로" and fill("{n}(으)로", {"n": 3}) == "3으로"
    assert fill("{a}과 {b}의 차이", {"a": "vLLM", "b": "단순 추론"}) == "vLLM과 단순 추론의 차이"
    assert fill("{a}과 {b}", {"a": "정적 배치", "b": 1}) == "정적 배치와 1"
    assert fill("{n:,}개를 {x}를", {"n": 1000, "x": "JSON"}) == "1,000개를 JSON을"


def test_through_a_closing_quote_code_or_bold():
    assert fill("'{v}'는 쓸 수 없습니다", {"v": "model"}) == "'model'은 쓸 수 없습니다"
    assert fill("'{v}'는 쓸 수 없습니다", {"v": "abc"}) == "'abc'는 쓸 수 없습니다"
    stop = "`python -m engine stop --port {port}`로 중지하세요"
    assert fill(stop, {"port": 8000}) == "`python -m engine stop --port 8000`으로 중지하세요"
    assert fill(stop, {"port": 8001}) == "`python -m engine stop --port 8001`로 중지하세요"
    assert fill("**{n}**이 남음", {"n": 2}) == "**2**가 남음"


def test_the_copula_and_a_particle_inside_a_longer_word():
    assert fill("{len}이라 더 긴 답변은", {"len": 512}) == "512라 더 긴 답변은"
    assert fill("{len}이라 더 긴 답변은", {"len": 100}) == "100이라 더 긴 답변은"
    assert fill("최대 {peak}였습니다", {"peak": "0.84 GB"}) == "최대 0.84 GB였습니다"
    assert fill("최대 {peak}였습니다", {"peak": 1000}) == "최대 1000이었습니다"
    assert fill("{bounds}여야 합니다", {"bounds": "0보다 큰 값"}) == "0보다 큰 값이어야 합니다"
    assert fill("'{name}'이라는 단계", {"name": "warmup"}) == "'warmup'이라는 단계"
    assert fill("'{name}'이라는 단계", {"name": "naive"}) == "'naive'라는 단계"
    assert fill("{x}로는 부족", {"x": 1000}) == "1000으로는 부족" and fill("{x}로는", {"x": "GPU"}) == "GPU로는"
    assert fill("{a}와의 차이", {"a": "vLLM"}) == "vLLM과의 차이"
    assert fill("{x}이다", {"x": "GB"}) == "GB이다"  # 이다 is right after either sound: left as written
    assert fill("{n}가지로", {"n": 3}) == "3가지로"  # a noun, not a particle


def test_what_cannot_be_heard_keeps_a_form_that_is_right_either_way():
    assert fill("{x}은 아닙니다", {"x": "🙂"}) == "🙂은(는) 아닙니다"
    assert fill("{x}이라서", {"x": "🙂"}) == "🙂이라서"


def test_the_catalogue_says_them_right():
    text = translate(say("The naive worker's process has exited: the {peak} of RAM it held at its peak (its own "
                         "resident memory) went back to the operating system with it.", peak=say("{v} GB", v="0.84")),
                     "ko")
    assert "0.84 GB가" in text, text
    text = translate(say("{fast} answered all {n} prompts soonest, in {t_fast} s; {slow} took longest, "
                         "{t_slow} s (one run each).", fast=say("Naive, one at a time"), n=5, t_fast="4.0",
                         slow=say("Static batch"), t_slow="8.0"), "ko")
    assert "(가)" not in text and "하나씩이 " in text and "정적 배치가 " in text, text


# -- every entry of the catalogue ---------------------------------------------------------------------------
# The particles whose form follows the sound before them, as this test knows them (more than engine.particles
# may): (after a final consonant, after a vowel); 으로/로 takes 로 after ㄹ too; the copula's full form is right
# after a vowel as well.
FORMS = [("은", "는"), ("이", "가"), ("을", "를"), ("과", "와"), ("으로", "로"), ("이라", "라"), ("이었", "였"),
         ("이어", "여"), ("이며", "며"), ("이고", "고"), ("이면", "면"), ("이나", "나"), ("이란", "란"), ("이든", "든"),
         ("이랑", "랑"), ("이에요", "예요"), ("이야", "야")]
COPULA = {c for c, v in FORMS if c.startswith("이") and c != "이"}
SPELLED = {s: (c, v) for c, v in FORMS  # either form, or both written out
           for s in [c, v, f"{c}({v})", f"{v}({c})", "(으)로" if c == "으로" else f"(이){v}" if c in COPULA else c]}
NOUNS = ("가지", "가량", "이상", "이하", "이내", "이후", "이전", "나머지")  # words that begin like a particle
CLOSERS = "'\"`’”»*_"
AFTER = re.compile(r"\{[^{}]*\}([" + re.escape(CLOSERS) + r"]*)([가-힣()]+)")
PROBES = {"쩝": C, "쀼": V, "뿔": L}  # values of each sound, found nowhere in the catalogue


class _Any:
    def __format__(self, spec: str) -> str:  # any other placeholder, whatever its format spec
        return "값"


def _particle(run: str) -> str | None:
    """The particle (as written) that `run`, the Hangul right after a placeholder, begins with."""
    if run.startswith(NOUNS):
        return None
    return next((s for s in sorted(SPELLED, key=len, reverse=True) if run.startswith(s)), None)


def unhandled(template: str) -> list[str]:
    """Each particle right after a placeholder in `template` that comes out wrong for some value."""
    fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    out = []
    for m in AFTER.finditer(template):
        written = _particle(m.group(2))
        if written is None:
            continue
        c, v = SPELLED[written]
        rest = m.group(2)[len(written):]
        probed = template[:m.start()] + "{probe__}" + template[m.start(1):]
        for probe, (consonant, rieul) in PROBES.items():
            said = filled(probed, {**{f: _Any() for f in fields}, "probe__": probe}, "ko")
            after = said[said.index(probe) + 1:].lstrip(CLOSERS)
            right = [v] if c == "으로" and rieul else [c] if consonant else [v, c] if c in COPULA else [v]
            if not any(after.startswith(form + rest) for form in right):
                out.append(f"{m.group(0)} -> {probe}{m.group(1)}{after[:len(m.group(2)) + 2]}")
                break
    return out


def _entries():
    with open(KO, "rb") as f:
        for message in read_po(f):
            if message.id:
                strings = message.string if isinstance(message.string, tuple) else (message.string,)
                yield (message.id if isinstance(message.id, str) else message.id[0]), [s for s in strings if s]


def test_every_particle_after_a_placeholder_follows_the_value():
    """Every catalogue entry where a particle right after a placeholder would come out wrong for a value of
    some sound ("{v}는" said of 'model', "`--port {port}`로" of 8000), listed: write the particle so
    engine.particles resolves it, or word the sentence so no particle follows the placeholder."""
    wrong = [f"{msgid[:70]!r}: {w}" for msgid, strings in _entries() for s in strings for w in unhandled(s)]
    assert not wrong, f"{len(wrong)} entries:\n" + "\n".join(wrong)


def test_the_listing_sees_what_is_wrong():
    assert unhandled("{x}든 {y}") and unhandled("'{v}'는") == [] and unhandled("{n}가지") == []


def _filled_by_the_browser() -> set[tuple[str, str]]:
    """(template, placeholder) of every sentence whose value is a plotly hover field ("%{y:,.0f}"): the browser
    puts the number in after the sentence was said, so no particle can follow its sound."""
    root = KO.parents[3]
    found = set()
    for path in [*root.glob("engine/**/*.py"), *root.glob("app_pages/**/*.py"), root / "ui.py"]:
        tree = ast.parse(path.read_text())
        dicts = {node.targets[0].id: {k.arg: k.value for k in node.value.keywords} for node in ast.walk(tree)
                 if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                 and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "dict"}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("say", "say_n", "_", "ngettext")
                    and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            values = {}
            for k in node.keywords:
                values.update(dicts.get(k.value.id, {}) if k.arg is None and isinstance(k.value, ast.Name)
                              else {k.arg: k.value})
            found |= {(node.args[0].value, name) for name, v in values.items()
                      if isinstance(v, ast.Constant) and isinstance(v.value, str) and "%{" in v.value}
    return found


def test_no_particle_follows_a_number_the_browser_fills_in():
    fields = _filled_by_the_browser()
    assert ("{x} s: {y} running", "y") in fields  # the scan sees them
    wrong = [f"{msgid!r}: {m.group(0)}" for msgid, strings in _entries() for s in strings
             for m in AFTER.finditer(s) if (msgid, m.group(0)[1:].split("}")[0].split(":")[0]) in fields
             and _particle(m.group(2))]
    assert not wrong, "\n".join(wrong)


def test_no_particle_is_written_out_both_ways():
    """'은(는)', '이(가)', '(으)로' in a translation: a Korean engineer writes the one form the word takes."""
    both = re.compile(r"[은는이가을를과와]\([은는이가을를과와]\)|\((?:으|이)\)[가-힣]")
    found = [f"{msgid[:70]!r}: {both.search(s).group(0)}" for msgid, strings in _entries() for s in strings
             if both.search(s)]
    assert not found, f"{len(found)} entries:\n" + "\n".join(found)
