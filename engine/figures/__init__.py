"""Plotly figures from runs, one module a concept: the pages, the CLI, the report and the docs draw the same charts,
each with its caption (`caption(fig)`), said in `lang`. See docs/internals.md#figures."""
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
from engine.figures.room import room_contrast, room_timeline, room_totals
from engine.figures.sweep import _label_sides, pareto_chart, sweep_chart
from engine.figures.sweep import by_rate as sweep_by_rate
from engine.figures.slots import slot_chart
from engine.figures.theme import caption, caption_said, note_under_title, template, title_said
from engine.metrics import METRICS, metric_info

__all__ = [
    "CONTENDERS",
    "METRICS",
    "PLOT_PX",
    "_label_sides",  # tests/test_figures.py checks the sweep's label placement directly
    "caption",
    "caption_said",
    "title_said",
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
    "note_under_title",
    "power_chart",
    "pareto_chart",
    "prefix_cache_compare",
    "request_timeline",
    "room_contrast",
    "room_timeline",
    "room_totals",
    "server_view_chart",
    "side_by_side",
    "slot_chart",
    "sweep_by_rate",
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
