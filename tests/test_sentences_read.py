"""A few sentences read whole, as a viewer reads them, in each language: the numbers formatted (thousands, a
percentage, a ratio), the values in their places, the Korean from the catalogue. Every other test about these
sentences reads their message ids and values (tests/said.py), so rewording one breaks only this file."""
from __future__ import annotations

import pytest

from engine.errors import LabError
from engine.measure.judge import failures, kvcache, slo, token_check, verdict
from engine.measure.load.spec import LoadSpec
from engine.messages import say, translate
from engine.observe import disturbance
from engine.results.records import Beside, Disturbance, KvCache, Notes, RequestRecord, TokenCount
from tests.test_kvcache import _run as kv_run
from tests.test_slo import handcrafted, run_of

SENTENCES = {
    "token check": (
        lambda: token_check.token_check(Notes(token_count=TokenCount(server=1400, client=1500))).sentences,
        ["The server counted 1,400 output tokens, the client 1,500 (ratio 0.93).",
         "They differ by 6.7%, more than 3%: the client's token counts, and the throughput made from them, are in "
         "doubt."],
        ["서버가 센 출력 토큰은 1,400개, 클라이언트가 센 출력 토큰은 1,500개입니다(비율 0.93).",
         "두 값이 6.7% 차이 나 허용 범위 3%를 넘습니다. "
         "클라이언트의 토큰 집계와 이를 바탕으로 계산한 처리량을 신뢰하기 어렵습니다."]),
    "KV cache": (
        lambda: [kvcache.said(kv_run(384, KvCache(block_size=128, preemptions=12, peak_waiting=5)))],
        ["With --kv-cache-memory-bytes 10737418 --max-model-len 256 the cache holds 384 tokens: 8 requests of 230 "
         "tokens (prompt and answer) need 1,840, so requests waited (up to 5 at once) and 12 were preempted."],
        ["--kv-cache-memory-bytes 10737418 --max-model-len 256 설정에서는 캐시에 384 토큰이 들어갑니다. "
         "230 토큰(프롬프트와 답변) 요청 8개에는 1,840 토큰이 필요하므로, "
         "요청이 대기했고(한 번에 최대 5개) 12개가 선점되었습니다."]),
    "SLO": (
        lambda: [slo.judge(run_of(handcrafted(), 4.0), slo.DEFAULT_SLO).said],
        ["Only 2 of 5 requests (40%) met the SLO (TTFT ≤ 2000 ms and TPOT ≤ 100 ms), less than 90%, so it does not "
         "hold: a goodput of 0.50 req/s."],
        ["요청 5개 중 2개(40%)만 SLO(TTFT ≤ 2000 ms 및 TPOT ≤ 100 ms)를 충족해 기준인 90%에 못 미치므로 SLO를 달성하지 "
         "못했습니다. goodput은 0.50 req/s입니다."]),
    "disturbance": (
        lambda: [disturbance.said(Notes(beside=Beside(disturbance=Disturbance(other_requests=5), chats=2)))],
        ["Measured while the server answered 5 requests from another client and 2 chat answers streamed beside it: "
         "this machine can do better than these numbers."],
        ["다음이 함께 실행되는 가운데 측정했습니다: 서버가 응답한 다른 클라이언트의 요청 5개, "
         "함께 스트리밍된 채팅 답변 2개. 이 머신은 이 수치보다 더 나은 성능을 낼 수 있습니다."]),
    "verdict": (
        lambda: [verdict.compare([100.0, 103.0, 98.0], b, name=say("Output throughput"), label_a="A", label_b="B").said
                 for b in ([150.0, 152.0, 149.0], [101.0, 99.0, 104.0])],
        ["Output throughput: B is higher than A, 1.50× (+50 %), beyond noise (95 % interval 1.42× to 1.58×; Welch's t "
         "on log values (a ratio of geometric means), 3 runs each).",
         "Output throughput: no measurable difference on this machine between A and B (measured 1.01× (+1.0 %); 95 % "
         "interval 0.955× to 1.07×, which holds no change; Welch's t on log values (a ratio of geometric means), 3 "
         "runs each)."],
        ["출력 처리량: A 대비 B 쪽이 높습니다. 1.50배 (+50 %), 노이즈를 넘는 차이입니다 (95 % 구간 1.42배–1.58배, "
         "로그값에 대한 Welch t 검정(기하평균의 비), 각 3회 실행).",
         "출력 처리량: 이 머신에서는 A, B 사이에 측정 가능한 차이가 없습니다 (측정값 1.01배 (+1.0 %), 95 % 구간 "
         "0.955배–1.07배에 '변화 없음' 포함, 로그값에 대한 Welch t 검정(기하평균의 비), 각 3회 실행)."]),
    "failure cause": (  # a sentence of three said apart (who, what happened, what to do), plural by the count
        lambda: [sentence for _, sentence in failures.failure_causes(
            [RequestRecord(index=i, prompt="p", send_time=0.0, end_time=1.0,
                           error="HTTP 400: max_tokens=2049 cannot be greater than max_model_len=2048")
             for i in range(3)] + [RequestRecord(index=3, prompt="p", send_time=0.0, first_token_time=0.5,
                                                 end_time=1.0, output_tokens=5)])],
        ["3 of 4 requests were refused because the prompt plus 2049 output tokens exceed the server's max-model-len of "
         "2048: lower the max tokens per answer or restart the server with a longer max-model-len."],
        ["요청 4개 중 3개가 프롬프트와 출력 토큰 2049개를 합한 길이가 서버의 max-model-len(2048)을 넘어 "
         "거부되었습니다. 답변당 최대 토큰 수를 낮추거나, max-model-len을 더 길게 설정해 서버를 재시작하세요."]),
    "refused input": (  # what a person typed, refused in one sentence with what to do
        lambda: [_refusal(lambda: LoadSpec(base_url="", model="", prompts=["p"], max_tokens=3000).validate(
            max_model_len=2048))],
        ["Max tokens per answer (3000) is more than the running server's max-model-len (2048 tokens): ask for 2048 or "
         "fewer, or restart the server with a longer max-model-len."],
        ["답변당 최대 토큰 수(3000)가 실행 중인 서버의 max-model-len(2048 토큰)보다 큽니다. "
         "2048 토큰 이하로 요청하세요. 또는 max-model-len을 더 길게 설정해 서버를 재시작하세요."]),
}


def _refusal(act):
    with pytest.raises(LabError) as refused:
        act()
    return refused.value


@pytest.mark.parametrize("name", SENTENCES)
def test_a_sentence_reads_whole_in_english_and_in_korean(name):
    make, english, korean = SENTENCES[name]
    said = make()
    assert [str(s) for s in said] == english
    assert [translate(s, "ko") for s in said] == korean
