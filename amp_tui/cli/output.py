"""What the commands print: tables of predictions and search results, strict JSON."""

from __future__ import annotations

import json
import math


def json_text(data: object) -> str:
    """Strict JSON: infinite or undefined figures (e.g. the time of a strategy that does not fit)
    are written as null, never as the Infinity or NaN that JSON does not have."""
    return json.dumps(_finite(data), indent=2, allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    if hasattr(value, "item") and callable(value.item):     # a numpy scalar
        return _finite(value.item())
    return value


def table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def placement_text(scenario, strategy) -> str:
    from amp_tui.core.costmodel.parts import placement_text

    return placement_text(scenario, strategy)


def summary(scenario) -> str:
    c, m, t = scenario.cluster, scenario.model, scenario.training
    groups = " + ".join(f"{g.count} x {g.label}" for g in c.nodes)
    from amp_tui.core.spec.knobs import describe

    calibrated = f"; calibrated ({scenario.calibration.source or 'calibration section'})" \
        if scenario.calibration.values else ""
    return (f"{scenario.name}: {c.num_gpus} GPUs ({groups}); {m.name}: {m.num_layers} layers, "
            f"{m.total_params / 1e9:.3g} B params; global batch {t.global_batch_size}, {t.precision}"
            f"{' (rowwise scaling)' if t.fp8_scaling == 'rowwise' else ''}, "
            f"{t.schedule}{_execution(t)}{calibrated}\ntechniques {describe(t, m)}"
            + (f"\nmodel {m.name}: {m.rebuilt}" if m.rebuilt else "") + sources_text(scenario) + network_text(scenario))


def network_text(scenario) -> str:
    """Lines saying which links the cluster's network profile measured (nothing without one)."""
    network = scenario.cluster.network
    if network is None:
        return ""
    from amp_tui.core.spec.network import link_report

    lines = [f"\nlinks from {network.summary()}"]
    for entry in link_report(scenario.cluster):
        said = [f"measured {'; '.join(entry['measured'])}"] if entry["measured"] else []
        if entry["catalog"]:
            said.append(f"not measured (catalog figures): {', '.join(entry['catalog'])}")
        lines.append(f"  group {entry['group']} ({entry['label']}): {'; '.join(said) or 'one GPU, one node'}")
    return "\n".join(lines)


def sources_text(scenario) -> str:
    """Lines saying where the layer times come from on each GPU type, and the profile file's
    provenance (nothing for a model nobody measured: every time is analytic)."""
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.costmodel.time_sources import sources_line

    profile = scenario.model.measured_profile
    line = sources_line(CostModel(scenario))
    return (f"\nlayer times from {profile.summary()}" if profile is not None else "") + (f"\n{line}" if line else "")


def warnings_text(scenario, predictions, ranks: list[str]) -> list[str]:
    """'warning: stages priced by different sources ...' once per distinct warning, with the ranks
    (or strategy numbers) it concerns."""
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.costmodel.time_sources import source_warning

    cost = CostModel(scenario)
    found: dict[str, list[str]] = {}
    for rank, p in zip(ranks, predictions):
        warning = source_warning(cost, p)
        if warning:
            found.setdefault(warning, []).append(rank)
    return [f"warning: {warning} ({', '.join(where)})" for warning, where in found.items()]


def _execution(training) -> str:
    """', pytorch, torch.compile': the framework where it is not the default, and compiled execution."""
    parts = [training.framework] if training.framework != "megatron" else []
    if training.compile:
        parts.append("torch.compile" + (" (CUDA graphs)" if training.compile == "cudagraphs" else ""))
    return "".join(f", {p}" for p in parts)


def _prediction_row(scenario, p, rank: str, best: float | None) -> list[str]:
    from amp_tui.core.base.units import format_bytes, format_seconds
    from amp_tui.core.plans.confidence import memory_at_risk

    s = p.strategy
    tight = p.tightest_stage
    row = [rank, s.label, str(s.micro_batch_size), str(p.num_micro_batches), format_seconds(p.iteration_time_s),
           f"{p.samples_per_s:.1f}", f"{format_bytes(tight.memory.total_bytes)} / {format_bytes(tight.capacity_bytes)}"
           + ("" if p.fits_memory else " OVER") + (" !" if memory_at_risk(p) else "")]
    if best is not None:
        row.append("best" if p.iteration_time_s <= best and rank == "1" or p.iteration_time_s == best
                   else f"{(p.iteration_time_s / best - 1) * 100:+.1f}%")
    from amp_tui.core.spec.knobs import resolve

    row += [resolve(s, scenario.training).short_label, _money(p.cost_per_hour_usd),
            _money(p.cost_per_million_tokens_usd), " ".join(str(n) for n in s.partition),
            placement_text(scenario, s) + _idle_text(scenario, s) + _shares_text(s)]
    return row


def custom_footnote(predictions) -> str:
    """The footnote of the rows marked †: what no stock engine runs, and the best plan one does."""
    from amp_tui.core.base.units import format_seconds
    from amp_tui.core.plans.runnable import STOCK_ENGINES, best_stock

    text = (f"† uneven batch shares or per-stage tp/dp: {STOCK_ENGINES} do not run these; only the torchrun and "
            "rankmap exports carry them, for a training script of your own")
    stock = best_stock(predictions)
    if stock is not None:
        rank, p = stock
        text += (f". The best plan they run: rank {rank}, {p.strategy.label} micro-batch {p.strategy.micro_batch_size}, "
                 f"{format_seconds(p.iteration_time_s)} (--save with --rank {rank})")
    return text


def _speedup_text(speedup: float) -> str:
    """'2.97x faster', or '3.20x slower' for a top strategy ranked by cost or under a budget."""
    return f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _idle_text(scenario, strategy) -> str:
    """'; idle: 1 x p3.8xlarge (group 2)' for the nodes a strategy leaves out."""
    if not strategy.idle:
        return ""
    groups = scenario.cluster.nodes
    return "; idle: " + ", ".join(f"{n} x {groups[g].label} (group {g})" for g, n in strategy.idle)


def _shares_text(strategy) -> str:
    """'; batch shares 16 x 12 + 16 x 4' for uneven data-parallel shares, runs of equal shares merged."""
    if not strategy.batch_shares:
        return ""
    from amp_tui.core.costmodel.placement import merge_runs

    runs = merge_runs((share, 1) for share in strategy.batch_shares)
    return "; batch shares " + " + ".join(f"{n} x {share}" if n > 1 else str(share) for share, n in runs)


def _cost_headers(scenario) -> list[str]:
    from amp_tui.core.costmodel.pricing import cost_unit

    return ["$/hour", f"$/M {cost_unit(scenario)}"]


def price_notes(scenario) -> list[str]:
    """'note: no price for cluster.nodes[1] (...)' for each group whose listed price does not apply."""
    notes = (group.price_note(i) for i, group in enumerate(scenario.cluster.nodes))
    return [f"note: {note}" for note in notes if note]


def render_predictions(scenario, predictions) -> str:
    from amp_tui.core.base.units import format_seconds

    headers = ["#", "tp x pp x dp", "mbs", "B", "iteration", "samples/s", "fullest stage memory",
               "techniques", *_cost_headers(scenario), "partition", "placement"]
    rows = [_prediction_row(scenario, p, str(i + 1), None) for i, p in enumerate(predictions)]
    from amp_tui.core.plans.confidence import confidence

    out = [summary(scenario), f"predicted times {confidence(scenario).describe()}",
           *warnings_text(scenario, predictions, [f"strategy {i + 1}" for i in range(len(predictions))]), "",
           table(headers, rows, {0, 2, 3, 4, 5, 8, 9}), *price_notes(scenario)]
    for i, p in enumerate(predictions):
        out.append("")
        out.append(f"strategy {i + 1}: {p.strategy.label}, micro-batch {p.strategy.micro_batch_size}: "
                   f"{format_seconds(p.steady_state_s)} steady state + {format_seconds(p.fill_drain_s)} fill/drain "
                   f"+ {format_seconds(p.dp_and_optimizer_s)} all-reduce/optimizer; bubble {p.bubble_fraction:.0%}")
        terms = p.time_terms()
        out.append("  made of: " + ", ".join(f"{name} {format_seconds(value)}" for name, value in terms.items()
                                            if value > 0) + f"; of which per-message latency {format_seconds(p.latency_s)}")
        if p.reason:
            out.append(f"  does not fit: {p.reason}")
        from amp_tui.core.costmodel.prediction import memory_terms_text

        out.append(f"  fullest stage's memory, {memory_terms_text(p.tightest_stage)}")
        out.append(_stagetable(p))
    return "\n".join(out)


def _stagetable(p) -> str:
    from amp_tui.core.base.units import format_bytes, format_seconds

    headers = ["stage", "layers", "GPU", "compute", "p2p comm", "all-reduce", "memory / capacity", "layer times"]
    rows = [[str(st.index), f"{st.first_layer}-{st.last_layer}", "+".join(st.gpu_types), format_seconds(st.compute_s),
             format_seconds(st.comm_s), format_seconds(st.dp_allreduce_s),
             f"{format_bytes(st.memory.total_bytes)} / {format_bytes(st.capacity_bytes)}" + ("" if st.fits else " OVER"),
             st.time_source]
            for st in p.stages]
    return "  " + table(headers, rows, {0, 3, 4, 5}).replace("\n", "\n  ")


def render_search(result, top: int, objective=None, idle_search=None) -> str:
    from amp_tui.core.base.units import format_seconds
    from amp_tui.core.search.orders import ORDERS_NOTE

    st = result.stats
    scenario = result.scenario
    orders = f" over {st.node_orders} node orders" if st.node_orders > 1 else ""
    out = [summary(scenario),
           f"searched {st.candidates} candidates{orders} in {st.search_time_s * 1000:.0f} ms: {st.evaluated} "
           f"evaluated, {st.pruned} pruned by bounds, {st.infeasible} out of memory"]
    if idle_search is not None:
        idle = ("all GPUs used (search.use_all_gpus)" if scenario.search.use_all_gpus
                else f"{idle_search.searched} of {idle_search.parts} ways to leave nodes idle searched"
                     f"{'' if idle_search.exact else ' (not exhaustive)'}")
        out.append(f"ranked by {objective.describe()}; {idle}")
        if idle_search.note:
            out.append(f"note: {idle_search.note}")
    if not st.all_node_orders:
        gap = st.orders_gap(result.strategies[0].iteration_time_s if result.strategies else None)
        if st.exact:
            out.append(f"note: {ORDERS_NOTE}; a lower bound over every other order shows that none enters "
                       "the ranking, so it is exact")
        elif gap is not None and idle_search is None:
            out.append(f"note: {ORDERS_NOTE}; another order could be at most {gap:.1%} better")
        else:
            out.append(f"note: {ORDERS_NOTE}")
    if result.strategies:
        from amp_tui.core.plans.confidence import confidence, within_band

        sure = confidence(scenario)
        close = within_band([p.iteration_time_s for p in result.strategies[:top]], sure.band)
        out.append(f"predicted times {sure.describe()}" + ("" if sure.band is None else f"; the top {close} are within "
                                                            "each other's band" if close > 1 else "; the top pick stands clear"))
    out.append("")
    if not result.strategies:
        from amp_tui.core.plans.no_strategy import nothing_found, state_shortfall

        if idle_search is not None and idle_search.out_of_time and not state_shortfall(scenario):
            out.append("no strategy found within the time limit")
        elif idle_search is not None and not idle_search.exact and not state_shortfall(scenario):
            # (a part not searched may hold one: nothing known to fit nowhere)
            out.append("no strategy found on the parts of the cluster searched (see the note above)")
        else:
            out.append(f"no strategy: {nothing_found(result, objective)}")
    else:
        best = result.strategies[0].iteration_time_s
        headers = ["rank", "tp x pp x dp", "mbs", "B", "iteration", "samples/s", "fullest stage memory", "gap",
                   "techniques", *_cost_headers(scenario), "partition", "placement"]
        from amp_tui.core.plans.runnable import best_stock, custom_only

        shown = result.strategies[:top]
        rows = [_prediction_row(scenario, p, str(i + 1) + ("†" if custom_only(p.strategy) else ""), best)
                for i, p in enumerate(shown)]
        out.append(table(headers, rows, {0, 2, 3, 4, 5, 9, 10}))
        out += warnings_text(scenario, shown, [f"rank {i + 1}" for i in range(len(shown))])
        if any(custom_only(p.strategy) for p in shown):
            out.append(custom_footnote(result.strategies))
        from amp_tui.core.plans.confidence import MEMORY_RISK_NOTE, memory_at_risk

        if any(memory_at_risk(p) for p in shown):
            out.append(MEMORY_RISK_NOTE)
        out += price_notes(scenario)
        from amp_tui.core.costmodel.prediction import memory_terms_text

        out += ["", f"memory of #1's fullest stage, {memory_terms_text(shown[0].tightest_stage)}"]
    if result.baseline is not None:
        b = result.baseline
        out += ["", f"uniform baseline (even split, rank order): {b.strategy.label} micro-batch "
                    f"{b.strategy.micro_batch_size}, {format_seconds(b.iteration_time_s)}"
                + (f"; the top strategy is {_speedup_text(result.speedup_vs_baseline)}" if result.strategies else "")]
    else:
        from amp_tui.core.plans.no_strategy import missing_baseline

        missing = missing_baseline(result, objective)
        if missing:
            out += ["", missing]
    if result.infeasible:
        out += ["", f"{len(result.infeasible)} candidates do not fit in memory, e.g.:"]
        for entry in result.infeasible[:3]:
            s = entry.strategy
            out.append(f"  {s.label} micro-batch {s.micro_batch_size}, {placement_text(scenario, s)}: "
                       f"{entry.reason}")
    return "\n".join(out)
