"""A finished run as `run` prints it (and bench/h200.py): its counts, latencies and what judge/ says of it."""
from __future__ import annotations


def summary_table(r, price_per_gpu_hour: float | None = None) -> str:
    """A finished run, as the CLI prints it; with a price per GPU-hour, what a million output tokens cost."""
    from engine.digits import significant
    from engine.measure.judge import ceiling, cost, failures, lateness, prefix, token_check, warmth
    from engine.measure.judge.slo import Slo, judge
    from engine.measure.load.spec import arrivals_recorded
    from engine.observe import disturbance

    s = r.summary
    check = token_check.token_check(r.extra)  # the server's count of the output tokens against the client's
    limit = ceiling.run_ceiling(r)  # its decode speed against what the memory bandwidth allows

    def ms(key: str) -> str:
        v = s.get(key)
        return "–" if v is None else f"{significant(v)} ms"

    lines = [
        f"== {r.label or r.scenario} [{r.kind}] ==",
        *((f"prompts' seed          {seed} (--seed {seed} sends these prompts again)",)
          if (seed := r.load.other.get("prompt_seed")) is not None else ()),
        *((f"request shape          {shape}",) if (shape := request_shape(r)) else ()),
        *((f"arrivals               {arrivals}",) if (arrivals := arrivals_recorded(r.load)) else ()),
        *((f"  {peak}",) if (peak := lateness.in_flight_said(r)) else ()),
        f"requests ok / failed   {_counted(failures.counts(r))}",
        *(f"  {sentence}" for _, sentence in failures.run_causes(r)),
        f"wall time              {r.duration:.2f} s",
        f"output tokens          {s.get('total_output_tokens', 0)}",
        *(f"  {sentence}" for sentence in (check.sentences if check else ())),
        f"output throughput      {significant(s.get('output_throughput'))} tok/s",
        *((f"  {cached}",) if (cached := prefix.cached_said(r)) else ()),
        *((f"  {beside}",) if (beside := disturbance.said(r.extra)) else ()),  # what else ran beside it
        f"TTFT mean / p99        {ms('mean_ttft_ms')} / {ms('p99_ttft_ms')}",
        f"TPOT mean              {ms('mean_tpot_ms')}",
        *((f"  {limit.sentence}",) if limit else ()),
        f"E2E latency mean / p99 {ms('mean_e2el_ms')} / {ms('p99_e2el_ms')}",
        *_by_turn(r),
    ]
    n = r.extra.kv
    if n.preemptions is not None or n.peak_waiting is not None:  # engine.measure.judge.kvcache.KvWatch
        cap = f"{tokens:,} tokens, " if (tokens := r.extra.server.kv_cache_tokens) else ""
        used = f"{n.peak_usage:.0%}" if n.peak_usage is not None else "–"
        preempted = n.preemptions if n.preemptions is not None else "–"
        lines.append(f"KV cache               {cap}peak {used} used, {preempted}"
                     f" preempted, up to {n.peak_waiting if n.peak_waiting is not None else '–'} waiting")
    if (per_million := cost.cost_per_million_output_tokens(price_per_gpu_hour, r.duration,
                                                           s.get("total_output_tokens"))) is not None:
        lines.append(f"cost / M output tokens {per_million:,.4f} at {price_per_gpu_hour:g} per GPU-hour "
                     "(measured wall time)")
    if held := lateness.budget_said(r.extra):
        lines.append(f"  {held}")
    if warm := warmth.warmup_cost(r.records):
        lines.append(f"  {warm.said}")
    if cold := warmth.said(r.extra):
        lines.append(f"  {cold}")
    lines += _server_and_energy(r)
    slo = Slo.from_config(r.extra.slo.goodput_ms)  # asked for with --slo-ttft-ms / --slo-tpot-ms
    if slo is not None and (verdict := judge(r, slo)) is not None:
        lines += [f"goodput                {significant(verdict.goodput)} req/s", f"  {verdict.said}"]
    return "\n".join(lines)


def request_shape(r) -> str:
    """What a run's requests carried beyond a plain chat request (as recorded: a header's value never is), the
    pages' sentence's parts (measure.load.shape.shape_parts): "the completions endpoint; top_p 0.9; extra body
    {"seed": 1}; headers X-Team (values not recorded)"; "" for a plain chat request."""
    from engine.measure.load.shape import shape_parts

    return str(shape_parts(r.load) or "")


def _by_turn(r) -> list[str]:
    """A multi-turn chat's TTFT turn by turn (judge/turns.py, the Load test page's chart): does a later turn, sent
    with the whole history so far, still start fast?"""
    from engine.digits import significant
    from engine.measure.judge.turns import by_turn

    turns = by_turn(r.records)
    if len(turns) < 2:
        return []
    lines = ["TTFT by turn           median and p99 of each turn's first token; the prompt its history grew to"]
    for t in turns:
        cached = (f", {t.mean_cached_tokens:,.0f} from the prefix cache" if t.mean_cached_tokens is not None
                  else "")
        lines.append(f"  turn {t.turn + 1}: TTFT median {significant((t.median_ttft_s or 0) * 1000)} ms, p99 "
                     f"{significant((t.p99_ttft_s or 0) * 1000)} ms; {t.mean_prompt_tokens or 0:,.0f} prompt "
                     f"tokens{cached} ({t.requests} answered)")
    return lines


def _counted(c) -> str:
    """'20 / 2' or, where some were never sent or are still out, '20 / 2, 78 never sent (100 planned)': the
    counts always add up to the requests planned."""
    text = f"{c.answered} / {c.failed}"
    if c.never_sent or c.in_flight:
        more = [f"{c.never_sent} never sent"] if c.never_sent else []
        more += [f"{c.in_flight} unfinished"] if c.in_flight else []
        text += f", {', '.join(more)} ({c.planned} planned)"
    return text


def _server_and_energy(r) -> list[str]:
    """Where vLLM says a request's time went (its histograms' medians, bucket estimates, and exact means) and the
    energy per output token, where the run recorded them."""
    from engine.digits import significant
    from engine.measure.judge import server_time
    from engine.observe import energy
    from engine.results.records import KeptHistogram

    lines = []
    hist = r.extra.server_view.histograms if r.extra.server_view else {}

    def ms(key: str, stat: str) -> str:
        h = hist.get(key) or KeptHistogram()
        return server_time.percentile_ms(h, 0.5) if stat == "p50" else significant(
            None if h.mean is None else h.mean * 1000)

    if any(k in hist for k in ("queue", "prefill", "decode")):
        phases = ("queue", "prefill", "decode")
        lines.append(f"server queue / prefill / decode  p50 {' / '.join(ms(k, 'p50') for k in phases)} ms (bucket "
                     f"estimates), mean {' / '.join(ms(k, 'mean') for k in phases)} ms")
        if server_time.bounded(r):
            lines.append(f"  {server_time.BOUNDS}")
        if (t := server_time.of(r)) is not None and t.queue_dominates:
            lines += [f"  {m}" for m in server_time.said(r) if "--max-num-seqs" in m]
    if batch := server_time.batch_said(r):  # how full the engine's steps were: continuous batching, counted
        lines.append(f"  {batch}")
    use = energy.use(r.extra.energy.reading, r.summary.get("total_output_tokens"))
    if use is not None and use.j_per_token is not None:
        lines.append(f"energy                 {use.j_per_token:.4f} J / output token, {use.tokens_per_j or 0:.2f} "
                     f"output tokens / J, {use.joules:,.1f} J ({energy.METHODS.get(use.method, use.method)})")
    elif r.extra.energy.missing:
        lines.append(f"energy                 – ({energy.missing_said(r.extra.energy.missing)})")
    from engine.measure.judge import speculation, utilization

    lines += [str(m) for m in (speculation.said(r), utilization.said(r), *utilization.why_absent(r)) if m]
    return lines


def repeats_table(runs) -> str:
    """N repeats of one load test: the median of its throughput and TTFT with their range (an interval from six
    repeats up), a repeat far from the others, and whether the prefix cache was emptied between them; a repeat that
    did not answer every request is named and left out."""
    from engine.measure.judge import failures, repeats

    lines = [f"== {len(runs)} repeats of {runs[0].label} ==" if runs[0].label else f"== {len(runs)} repeats =="]
    if left := [r.extra.repeat.index for r in runs if r.extra.repeat.failed]:  # never a zero among the measured
        lines.append(f"  left out: repeat {', '.join(map(str, left))} (not every request answered)")
    runs = failures.counted_repeats(runs)
    for key, name in (("output_throughput", "output throughput (tok/s)"), ("mean_ttft_ms", "mean TTFT (ms)"),
                      ("p99_ttft_ms", "p99 TTFT (ms)")):
        if (spread := repeats.of_runs(runs, key)) is not None:
            lines.append(f"{name:26} {spread.said}")
            lines += [f"  {said}" for said in spread.outliers_said]
    if said := repeats.reset_said(runs):
        lines.append(f"  {said}")
    return "\n".join(lines)
