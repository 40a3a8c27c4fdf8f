"""Replay the measured runs through the cost model and score it, per source and as a macro average.

Replay goes through the public API (`core.evaluate.evaluate`) with each run's strategy and
partition; runs that give no partition get Megatron's default split, never the searched one.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import AUTO
from amp_tui.core.validation import metrics
from amp_tui.core.validation.runs import SOURCE_KEYS, ReplayCase, is_model_gap, load_cases, unsupported


class _Everything:
    def __contains__(self, item) -> bool:
        return True


# For --approximate: every technique counts as honoured, so the cost model replays runs whose
# techniques it ignores. Such figures find systematic errors; they never score the model.
EVERYTHING: dict = defaultdict(_Everything)


@dataclass(frozen=True)
class Replayed:
    case: ReplayCase
    predicted_s: float
    predicted_peak_bytes: float
    predicted_fits: bool

    @property
    def error(self) -> float | None:
        """Signed relative error of the time: > 0 predicted too slow, < 0 too fast."""
        measured = self.case.measured.iteration_time_s
        return (self.predicted_s - measured) / measured if measured else None


@dataclass(frozen=True)
class Skipped:
    case: ReplayCase
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Validation:
    replayed: tuple[Replayed, ...]
    skipped: tuple[Skipped, ...]
    elapsed_s: float
    approximate: bool = False


def check_source(source: str | None, cases: list[ReplayCase] | None = None) -> None:
    known = _source_order(case.source for case in cases or ())
    if source is not None and source not in known:
        raise SpecError("--source", source, f"unknown source; known: {', '.join(known)}")


def _source_order(sources) -> list[str]:
    """The published sources in their order, then any other a runs file names, as first met."""
    return list(dict.fromkeys([*SOURCE_KEYS, *sources]))


def run_validation(source: str | None = None, approximate: bool = False,
                   cases: list[ReplayCase] | None = None) -> Validation:
    """Replay every case (of one source) the cost model can express; list the others with why."""
    start = time.perf_counter()
    cases = load_cases() if cases is None else cases
    check_source(source, cases)
    honoured = EVERYTHING if approximate else None
    costs: dict[int, CostModel] = {}   # scenarios are shared between the runs that describe them
    replayed, skipped = [], []
    for case in cases:
        if source is not None and case.source != source:
            continue
        reasons = unsupported(case, honoured)
        if reasons:
            skipped.append(Skipped(case, tuple(reasons)))
            continue
        if id(case.scenario) not in costs:
            costs[id(case.scenario)] = CostModel(case.scenario)
        cost = costs[id(case.scenario)]
        try:
            prediction = predict_case(case, cost)
        except SpecError as err:
            # The full message names values that differ per run; the field groups them.
            skipped.append(Skipped(case, (f"cannot be evaluated: {err.field} rejected",)))
            continue
        replayed.append(Replayed(case, prediction.iteration_time_s, peak_as_measured(prediction, case),
                                 prediction.fits_memory))
    return Validation(tuple(replayed), tuple(skipped), time.perf_counter() - start, approximate)


def peak_as_measured(prediction: Prediction, case: ReplayCase) -> float:
    """The prediction's peak memory as the run measured it (runs.MEMORY_BASES): the fullest
    stage's total on the device, or what PyTorch's allocator reserved or allocated."""
    field = {"device": "total_bytes", "reserved": "reserved_bytes", "allocated": "allocated_bytes"}
    return max(getattr(st.memory, field[case.measured.memory_basis]) for st in prediction.stages)


def predict_case(case: ReplayCase, cost: CostModel) -> Prediction:
    """The run's prediction under `cost` (a cost model of its scenario, perhaps with another
    calibration); where the run does not state its recomputation, the fastest kind that fits
    (what a tuned recipe runs), else the one that needs the least memory."""
    if case.recompute != AUTO:
        return evaluate(cost.scenario, case.strategy, cost)
    options = [evaluate(cost.scenario, replace(case.strategy, recompute=kind), cost)
               for kind in ("none", "selective", "full")]
    fitting = [p for p in options if p.fits_memory]
    if fitting:
        return min(fitting, key=lambda p: p.iteration_time_s)
    return min(options, key=lambda p: p.peak_memory_bytes)


# -- scores -----------------------------------------------------------------------------------

WITHIN = (0.10, 0.25)


def score(replayed: list[Replayed] | tuple[Replayed, ...]) -> dict:
    """Every measure over one set of replayed runs (one source, or all of them)."""
    timed = [r for r in replayed if r.case.measured.iteration_time_s]
    predicted = [r.predicted_s for r in timed]
    measured = [r.case.measured.iteration_time_s for r in timed]
    groups: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for r, p, m in zip(timed, predicted, measured):
        groups[r.case.group][0].append(p)
        groups[r.case.group][1].append(m)
    rho, rho_groups = metrics.median_group_spearman(groups)
    with_memory = [r for r in replayed if r.case.measured.peak_memory_bytes]
    out = {
        "replayed": len(replayed), "timed": len(timed),
        "mape": metrics.mape(predicted, measured), "median_ape": metrics.median_ape(predicted, measured),
        "bias": metrics.median_error(predicted, measured),
        **{f"within_{round(t * 100)}": metrics.share_within(predicted, measured, t) for t in WITHIN},
        "spearman": rho, "spearman_groups": rho_groups, "top_pick": metrics.worst_group_top_pick(groups),
        "memory_mape": metrics.mape([r.predicted_peak_bytes for r in with_memory],
                                    [r.case.measured.peak_memory_bytes for r in with_memory]),
        "memory_runs": len(with_memory),
        **metrics.memory_agreement([r.case.measured.out_of_memory for r in replayed],
                                   [r.predicted_fits for r in replayed]),
    }
    amp = [r for r in timed if r.case.amp_predicted_s]
    if amp:
        amp_groups: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
        for r in amp:
            amp_groups[r.case.group][0].append(r.case.amp_predicted_s)
            amp_groups[r.case.group][1].append(r.case.measured.iteration_time_s)
        out["amp_model"] = {
            "runs": len(amp),
            "mape": metrics.mape([r.case.amp_predicted_s for r in amp], [r.case.measured.iteration_time_s for r in amp]),
            "top_pick": metrics.worst_group_top_pick(amp_groups),
            **dict(zip(("spearman", "groups"), metrics.median_group_spearman(amp_groups)))}
    return out


MACRO_KEYS = ("mape", "median_ape", "bias", "within_10", "within_25", "spearman", "top_pick", "memory_mape")


def report(validation: Validation) -> dict:
    """The whole result as plain data (strict JSON: None where a measure is undefined)."""
    by_source: dict[str, list[Replayed]] = defaultdict(list)
    for r in validation.replayed:
        by_source[r.case.source].append(r)
    totals = Counter(r.case.source for r in validation.replayed) + Counter(s.case.source for s in validation.skipped)
    sources = {key: {"runs": totals[key], **score(by_source[key])} for key in _source_order(totals) if totals[key]}
    scored = [s for s in sources.values() if s["timed"]]
    reasons: dict[str, dict] = {}
    for s in validation.skipped:
        for reason in s.reasons:
            entry = reasons.setdefault(reason, {"runs": 0, "only_reason": 0, "model_gap": is_model_gap(reason)})
            entry["runs"] += 1
            entry["only_reason"] += len(s.reasons) == 1
    return {
        "approximate": validation.approximate,
        "runs": len(validation.replayed) + len(validation.skipped),
        "replayed": len(validation.replayed),
        "elapsed_s": round(validation.elapsed_s, 3),
        "sources": sources,
        "macro": {"sources": len(scored), **{key: metrics.macro(s[key] for s in scored) for key in MACRO_KEYS}},
        "all_runs": score(validation.replayed),
        "not_replayed": {
            "runs": len(validation.skipped),
            "reasons": dict(sorted(reasons.items(), key=lambda item: (-item[1]["runs"], item[0]))),
            "cases": [{"id": s.case.id, "source": s.case.source, "reasons": list(s.reasons)}
                      for s in validation.skipped]},
        "results": [{"id": r.case.id, "source": r.case.source, "group": r.case.group,
                     "strategy": _label(r.case.strategy),
                     "measured_s": r.case.measured.iteration_time_s, "time_basis": r.case.measured.time_basis,
                     "predicted_s": r.predicted_s, "error": r.error,
                     "measured_peak_bytes": r.case.measured.peak_memory_bytes,
                     "predicted_peak_bytes": r.predicted_peak_bytes, "measured_oom": r.case.measured.out_of_memory,
                     "predicted_fits": r.predicted_fits, "assumptions": list(r.case.assumptions)}
                    for r in validation.replayed],
    }


def _label(s) -> str:
    """tp x pp x dp, then the micro-batch and the techniques that differ from the defaults."""
    extra = [f"cp{s.cp}" if s.cp and s.cp > 1 else "", f"v{s.virtual_stages}" if (s.virtual_stages or 1) > 1 else "",
             "sp" if s.sequence_parallel else "", f"z{s.zero_stage}" if s.zero_stage else "",
             f"rc-{s.recompute}" if s.recompute and s.recompute != "none" else ""]
    return " ".join([f"{s.tp}x{s.pp}x{s.dp} mbs{s.micro_batch_size}", *filter(None, extra)])


# -- text -------------------------------------------------------------------------------------

def table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _rho(value: float | None, groups: int) -> str:
    return "-" if value is None else f"{value:.2f} ({groups})"


def _row(name: str, s: dict) -> list[str]:
    memory = "-" if s.get("memory_mape") is None else f"{_pct(s['memory_mape'])} ({s['memory_runs']})"
    oom = f"{s['oom_predicted_to_fit']}/{s['oom_runs']}" if s.get("oom_runs") else "-"
    ran = f"{s['ran_predicted_oom']}/{s['ran_runs']}" if s.get("ran_runs") else "-"
    return [name, str(s.get("runs", "")), str(s.get("replayed", "")), _pct(s["mape"]), _pct(s.get("loso_mape")),
            _pct(s["median_ape"]),
            _signed(s["bias"]), _pct(s["within_10"]), _pct(s["within_25"]), _rho(s["spearman"], s.get("spearman_groups", 0)),
            _ratio(s["top_pick"]), memory, oom, ran]


def render(rep: dict, verbose: bool = False, runs: str = "published measured runs") -> str:
    """The report as text; `runs` names what was replayed (a --runs file's path)."""
    headers = ["source", "runs", "replayed", "MAPE", "LOSO", "median", "bias", "<=10%", "<=25%", "Spearman (groups)",
               "top pick", "memory (runs)", "OOM->fits", "ran->OOM"]
    rows = [_row(name, s) for name, s in rep["sources"].items()]
    macro = rep["macro"]
    rows.append(_row(f"macro ({macro['sources']} source{'s' if macro['sources'] != 1 else ''})",
                     {**macro, "spearman_groups": sum(s["spearman_groups"] for s in rep["sources"].values()),
                      "memory_runs": sum(s["memory_runs"] for s in rep["sources"].values())}))
    title = ("approximate replay: runs whose techniques the cost model ignores are replayed anyway; "
             "not a score" if rep["approximate"] else f"cost model against {runs}")
    out = [f"{title}: {rep['replayed']} of {rep['runs']} runs replayed in {rep['elapsed_s']:.1f} s", "",
           table(headers, rows, right=set(range(1, len(headers))))]
    held = rep.get("held_out")
    if held and held.get("available"):
        blocks = held["blocks"]
        out.append(f"H200 block measurements ({blocks['runs']} blocks, fitted with the runs): MAPE "
                   f"{_pct(blocks['mape'])}, leave-one-source-out {_pct(blocks['loso_mape'])}")
    elif held:
        out.append(f"leave-one-source-out: not shown, {held['reason']}")
    for name, s in rep["sources"].items():
        amp = s.get("amp_model")
        if amp:
            out.append(f"AMP's own model on its {amp['runs']} {name} runs: MAPE {_pct(amp['mape'])}, "
                       f"Spearman {_rho(amp['spearman'], amp['groups'])}, top pick {_ratio(amp['top_pick'])}")
    out.append("LOSO: MAPE with parameters fitted without the source (validate --fit); "
               "bias: median of predicted/measured - 1 (below 0: predicted too fast); top pick: measured time of "
               "the run predicted fastest over the fastest measured, worst group; OOM->fits: runs that ran out of "
               "memory predicted to fit; ran->OOM: runs that ran predicted not to")
    skipped = rep["not_replayed"]
    if skipped["runs"]:
        out += ["", f"{skipped['runs']} runs not replayed (a run may have several reasons; "
                    "'alone': runs this reason alone keeps out):"]
        reason_rows = [[str(e["runs"]), str(e["only_reason"]), "model" if e["model_gap"] else "data", reason]
                       for reason, e in skipped["reasons"].items()]
        out.append(table(["runs", "alone", "lacks", "reason"], reason_rows, right={0, 1}))
        if verbose:
            out.append("")
            out += [f"  {c['id']} ({c['source']}): {'; '.join(c['reasons'])}" for c in skipped["cases"]]
    if verbose and rep["results"]:
        rows = [[r["id"], r["strategy"], _seconds(r["measured_s"]), _seconds(r["predicted_s"]), _signed(r["error"]),
                 "fits" if r["predicted_fits"] else "OOM", "ran out of memory" if r["measured_oom"] else r["time_basis"]]
                for r in rep["results"]]
        out += ["", "replayed runs:",
                table(["run", "strategy", "measured", "predicted", "error", "memory", "measured as"], rows, {2, 3, 4})]
    return "\n".join(out)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} s"
