"""The Load test page's request shape, folded away above its forms: the endpoint, sampling parameters, HTTP headers,
an extra body and LoRA modules, as `vllm bench serve` sends them, for every run the page starts (the load test, the
sweep, the SLO search, the pair). Read when a Run is pressed (engine.measure.load.shape.request_fields says a bad one
in one sentence; engine.measure.workloads.defaults.with_request puts it on each run's spec)."""
from dataclasses import dataclass

import streamlit as st

import i18n
from engine.measure.load.shape import request_fields
from i18n import N_, _

ENDPOINTS = {N_("Chat completions"): "chat", N_("Completions (prompt as text)"): "completions",
             N_("Embeddings (a pooling model)"): "embeddings", N_("Rerank (a cross-encoder)"): "rerank"}
ASSIGNMENTS = {N_("In turn (round-robin)"): "round-robin", N_("At random (seeded)"): "random"}
# name, label, step: the sampling parameters vllm bench serve sends (LoadSpec's SAMPLING), empty by default
SAMPLING = (("top_p", "top_p", 0.05), ("top_k", "top_k", 1), ("min_p", "min_p", 0.05),
            ("frequency_penalty", "frequency_penalty", 0.1), ("presence_penalty", "presence_penalty", 0.1),
            ("repetition_penalty", "repetition_penalty", 0.05))
HEADER_ROWS = 3


@dataclass
class Chosen:
    """What the boxes hold, read into LoadSpec fields only when Run is pressed."""

    endpoint: str
    temperature: float
    sampling: dict
    headers: list
    extra_body: str
    lora_modules: str
    lora_weights: str
    lora_assignment: str

    def fields(self) -> dict:
        """The LoadSpec fields (a ConfigError's one sentence for a bad one)."""
        return request_fields(self.endpoint, self.temperature, self.sampling, self.headers, self.extra_body,
                              self.lora_modules, self.lora_weights, self.lora_assignment)


def boxes() -> Chosen:
    """The request's shape, under one folded expander, for every run on the page."""
    with st.expander(_("Request: endpoint, sampling, headers, extra body, LoRA"), icon=":material/tune:"):
        st.caption(_("Every run on this page sends requests of this shape: the load test, the sweep, the SLO search "
                     "and the pair."))
        a, b = st.columns([2, 1])
        endpoint = a.selectbox(_("Endpoint"), list(ENDPOINTS), key="load_endpoint", format_func=i18n.shown(ENDPOINTS),
                               help=_("Chat: /v1/chat/completions, as in the lab. Completions: /v1/completions with "
                                      "the prompt as text. Embeddings: /v1/embeddings, for a server of a pooling "
                                      "model (latency and prompt tokens only). Rerank: /v1/rerank, for a "
                                      "cross-encoder: each prompt is the query, the next ones its documents."))
        temperature = b.number_input(_("Temperature"), min_value=0.0, max_value=2.0, value=0.7, step=0.1,
                                     key="load_temperature")
        cols = st.columns(len(SAMPLING))
        sampling = {key: col.number_input(label, value=None, step=step, key=f"load_{key}",
                                          placeholder=_("server's"))
                    for col, (key, label, step) in zip(cols, SAMPLING)}
        st.caption(_("A sampling parameter left empty is not sent: the server's default applies."))
        headers = []
        for i in range(HEADER_ROWS):
            n, v = st.columns(2)
            # an example in the first row only: the same grey name in every row read as three headers already set
            headers.append((n.text_input(_("Header name"), key=f"load_header_name_{i}",
                                         placeholder="X-Request-Source" if i == 0 else None,
                                         label_visibility="visible" if i == 0 else "collapsed"),
                            v.text_input(_("Header value"), key=f"load_header_value_{i}", type="password",
                                         label_visibility="visible" if i == 0 else "collapsed")))
        st.caption(_("Headers are sent with every request; their values are never recorded, exported or shown in "
                     "the code behind a run (it reads each from an environment variable)."))
        extra_body = st.text_area(_("Extra body (JSON)"), key="load_extra_body", height=68,
                                  placeholder='{"seed":0}',
                                  help=_("A JSON object merged into every request's body, e.g. `{\"seed\": 0}` or "
                                         "`{\"chat_template_kwargs\":{\"enable_thinking\":false}}`; recorded with "
                                         "the run."))
        m, w, h = st.columns([2, 1, 1])
        lora_modules = m.text_input(_("LoRA modules"), key="load_lora_modules", placeholder="sql-lora chat-lora",
                                    help=_("Names the server serves its adapters under (its --lora-modules), "
                                           "separated by spaces: each request names one of them instead of the "
                                           "model."))
        lora_weights = w.text_input(_("Weights"), key="load_lora_weights", placeholder="3 1",
                                    help=_("Each module's share of the requests, in the same order (empty: equal)."))
        assignment = h.selectbox(_("Assignment"), list(ASSIGNMENTS), key="load_lora_assignment",
                                 format_func=i18n.shown(ASSIGNMENTS))
    return Chosen(ENDPOINTS[endpoint], float(temperature), sampling, headers, extra_body, lora_modules, lora_weights,
                  ASSIGNMENTS[assignment])
