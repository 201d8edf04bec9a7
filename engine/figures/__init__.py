"""Plotly figures from runs: the pages, the CLI and the docs draw the same charts.

Every figure function returns a `go.Figure` built for a projector (big fonts, Okabe-Ito colours that
colour-blind viewers can tell apart, few gridlines, units on every axis) with a short title. Each
also carries a one-sentence caption that tells a viewer what to notice: read it with
`caption(fig)` (it lives in `fig.layout.meta["caption"]`), e.g.

    fig = figures.request_timeline(run)
    st.plotly_chart(fig); st.caption(figures.caption(fig))

Every figure function takes `lang` (default "en"): its text, caption included, said in that language
(the pages pass the viewer's, `lang=i18n.lang()`; the CLI, the docs and the bench draw English).

One module a concept: `theme` (the look, captions, labels), `requests` (the requests inside one run),
`contenders` (the Naive page's four), `sweep` (a concurrency sweep and its Pareto view), `compare` (saved runs
compared; two servers measured at once on one clock),
`kvcache` (the KV cache per server configuration), `ceiling` (decode speed
against the memory-bandwidth limit), `slots` (the batch's slots step by step: static against continuous
batching), `machine` (memory and /metrics over time), `prefix` (prefix caching on vs off), `server_view` (where a request's time
went inside vLLM against the client's clock, and a run's energy), `export` (PNG files). The
metric catalogue they name metrics by is engine.metrics. Pure plotly: nothing here imports
streamlit, torch or vllm.
See docs/architecture.md.
"""
from engine.figures.ceiling import ceiling_bars
from engine.figures.compare import history_compare, side_by_side, tuning_compare
from engine.figures.contenders import CONTENDERS, contender, contender_name, contenders_chart, latency_bars
from engine.figures.export import to_png, to_pngs
from engine.figures.kvcache import kv_compare
from engine.figures.runs_table import compare_table
from engine.figures.machine import PLOT_PX, event_list, memory_chart, metrics_chart, power_chart, time_window
from engine.figures.prefix import prefix_cache_compare
from engine.figures.server_view import energy_cost_line, energy_line, j_per_token, server_view_chart
from engine.figures.requests import concurrent_latency_bars, request_timeline, throughput_over_time, token_timeline
from engine.figures.sweep import _label_sides, pareto_chart, sweep_chart
from engine.figures.slots import slot_chart
from engine.figures.theme import caption, template
from engine.metrics import METRICS, metric_info

__all__ = [
    "CONTENDERS",
    "METRICS",
    "PLOT_PX",
    "_label_sides",  # tests/test_figures.py checks the sweep's label placement directly
    "caption",
    "ceiling_bars",
    "concurrent_latency_bars",
    "energy_cost_line",
    "energy_line",
    "contender",
    "contender_name",
    "contenders_chart",
    "history_compare",
    "j_per_token",
    "kv_compare",
    "latency_bars",
    "memory_chart",
    "metric_info",
    "metrics_chart",
    "power_chart",
    "pareto_chart",
    "prefix_cache_compare",
    "request_timeline",
    "server_view_chart",
    "side_by_side",
    "slot_chart",
    "sweep_chart",
    "template",
    "throughput_over_time",
    "time_window",
    "event_list",
    "compare_table",
    "to_png",
    "to_pngs",
    "token_timeline",
    "tuning_compare",
]
