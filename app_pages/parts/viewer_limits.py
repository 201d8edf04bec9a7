"""The viewer's own limits and prices (each viewer's session, not the shared drawings): the SLO that judges a run,
the sweep and the search, and the prices per GPU-hour and per kWh a run's cost is said at."""
import streamlit as st

import i18n
import ui
from engine import figures
from engine.measure.judge.slo import ATTAINMENT, DEFAULT_SLO, Slo, judge
from i18n import _


def slo():
    """This viewer's SLO (the inputs below; read in the fragments, which redraw on their own); a ConfigError
    for limits it refuses."""
    return Slo(ttft_ms=float(st.session_state.get("slo_ttft_ms", DEFAULT_SLO.ttft_ms)),
               tpot_ms=float(st.session_state.get("slo_tpot_ms", DEFAULT_SLO.tpot_ms)))


def boxes() -> None:
    """The folded SLO box and the two price boxes, side by side."""
    # The SLO is each viewer's own (their session): it judges the run and the sweep shown below, and a change
    # redraws only this viewer's page. The defaults and why they suit a chat user: engine/measure/judge/slo.py.
    # Folded (the limits keep their values): the run's picture and numbers stay on a projector's first screen.
    slo_box, price_box = st.columns(2)
    slo_cols = slo_box.expander(_("Service-level objective (SLO)"), icon=":material/timer:").columns(
        [1, 1, 3], gap="large", vertical_alignment="center")
    slo_cols[0].number_input(_("TTFT limit (ms)"), value=int(DEFAULT_SLO.ttft_ms), step=100, key="slo_ttft_ms",
                             help=_("The longest a user may wait for the first token."))
    slo_cols[1].number_input(_("TPOT limit (ms)"), value=int(DEFAULT_SLO.tpot_ms), step=10, key="slo_tpot_ms",
                             help=_("The longest each later token may take on average (100 ms is 10 tokens/s)."))
    # the engine's sentence for limits it refuses; runs are then judged by no SLO
    if slo_refused := ui.refusal(lambda: Slo(ttft_ms=float(st.session_state["slo_ttft_ms"]),
                                             tpot_ms=float(st.session_state["slo_tpot_ms"]))):
        st.error(ui.plain(slo_refused), icon=":material/error:")
    target, ttft, rate = (f"{ATTAINMENT:.0%}", f"{DEFAULT_SLO.ttft_ms / 1000:g}",
                          f"{1000 / DEFAULT_SLO.tpot_ms:g}")
    slo_cols[2].caption(_("These limits are your choice, not a standard: a request is good when it meets both, as "
                          "`vllm bench serve --goodput` counts it, and a run meets the SLO when at least {target} "
                          "of its requests are good. The defaults suit a chat user: text starts within {ttft} s, then "
                          "streams at {rate} tokens/s, faster than people read.", target=target, ttft=ttft, rate=rate))
    price_cols = price_box.expander(_("Price per GPU-hour (cost per million tokens)"),
                                    icon=":material/payments:").columns([1, 3], gap="large",
                                                                        vertical_alignment="center")
    with price_cols[0]:
        ui.gpu_price("load")
    price_cols[1].caption(_("Cost per million output tokens = price per GPU-hour / 3600 × the measured wall time / "
                            "the output tokens × 1,000,000: the rate pays for the whole machine, only while the run "
                            "measured (not the warm-up, nor idle time between runs)."))
    kwh_cols = price_box.expander(_("Price per kWh (energy cost per million tokens)"),
                                  icon=":material/bolt:").columns([1, 3], gap="large", vertical_alignment="center")
    with kwh_cols[0]:
        ui.kwh_price("load")
    kwh_cols[1].caption(_("Energy cost per million output tokens = J per output token × 1,000,000 / 3,600,000 × the "
                          "price per kWh, from the energy measured over the run's measured part (an NVIDIA GPU's "
                          "counter, or RAPL): the electricity only, not the machine."))


def price():
    """This viewer's price per GPU-hour (blank: None), read in the fragments like the SLO."""
    return st.session_state.get("gpu_price")


def cost(run) -> None:
    """What a million of the run's output tokens cost at this viewer's price."""
    if (said := ui.cost_text(run, price())) is not None:
        st.markdown(_("At **{price}** per GPU-hour, a million output tokens cost **{cost}** ({tokens} output tokens "
                      "in {wall}).", price=i18n.number(price(), 2), cost=said,
                      tokens=i18n.number(run.summary.get("total_output_tokens", 0)), wall=i18n.seconds(run.duration)))
    if line := figures.energy_cost_line(run, st.session_state.get("kwh_price"), lang=i18n.lang()):
        st.markdown(f":material/bolt: {ui.plain(line)}")


def slo_verdict(run) -> None:
    """How many of the run's requests met this viewer's SLO, and its goodput: green when it holds."""
    if ui.refusal(slo):
        return  # its sentence is under the limits
    verdict = judge(run, slo())
    if verdict is None or not verdict.requests:
        return
    (st.success if verdict.meets else st.warning)(ui.plain(verdict.said), icon=":material/timer:")
