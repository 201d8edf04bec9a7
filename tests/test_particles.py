"""Korean particles by the final sound of the word or number before them (issue #30): "0.84 GB가", "하나씩은",
never "0.84 GB이" or "하나씩은(는)"; through the catalogue as the pages and the report say them."""
from __future__ import annotations

import pytest

from engine.messages import say, translate
from engine.particles import fill, final_sound


@pytest.mark.parametrize("word, consonant", [
    ("하나씩", True), ("한꺼번에", False), ("0.84 GB", False), ("512", False), ("10", True), ("100", True),
    ("3", True), ("7", True), ("9", False), ("0", True), ("10%", False), ("model", True), ("'chat'", True),
    ("test", False), ("URL", True), ("**4.0초**", False), ("vLLM", True)])
def test_the_final_sound(word, consonant):
    assert final_sound(word)[0] is consonant


def test_a_particle_after_a_placeholder_takes_the_values_sound():
    assert fill("{peak}이 돌아갔고", {"peak": "0.84 GB"}) == "0.84 GB가 돌아갔고"
    assert fill("{fast}은(는) 빨랐다", {"fast": "단순 추론, 하나씩"}) == "단순 추론, 하나씩은 빨랐다"
    assert fill("{fast}은(는) 빨랐다", {"fast": "vLLM, 한꺼번에"}) == "vLLM, 한꺼번에는 빨랐다"
    assert fill("--max-model-len {len}으로 실행", {"len": 512}) == "--max-model-len 512로 실행"
    assert fill("{n}(으)로", {"n": 7}) == "7로" and fill("{n}(으)로", {"n": 3}) == "3으로"
    assert fill("{x}이다", {"x": "GB"}) == "GB이다"  # not a particle: left as written


def test_the_catalogue_says_them_right():
    text = translate(say("The naive worker's process has exited: the {peak} of RAM it held at its peak (its own "
                         "resident memory) went back to the operating system with it.", peak=say("{v} GB", v="0.84")),
                     "ko")
    assert "0.84 GB가" in text, text
    text = translate(say("{fast} answered all {n} prompts soonest, in {t_fast} s; {slow} took longest, "
                         "{t_slow} s (one run each).", fast=say("Naive, one at a time"), n=5, t_fast="4.0",
                         slow=say("Static batch"), t_slow="8.0"), "ko")
    assert "(가)" not in text and "하나씩이 " in text and "정적 배치가 " in text, text
