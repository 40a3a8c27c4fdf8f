#!/usr/bin/env python3
"""Issue 29's GPU check: profile two models on this GPU, run whole iterations, compare predictions.

For GPT-2 medium (AMP's 30-layer preset) and a reduced-depth Llama-3 8B (its shapes, 4 layers at
4,096 tokens: the whole 8B model with Adam needs ~128 GB of weights and optimizer state alone), on
one GPU (tp = pp = dp = 1), plain PyTorch, bf16 autocast:

  1. `amp-tui profile SCENARIO --tp 1,2 --micro-batch 1,2,4 --iterations`: the layer profile and
     whole training iterations (micro-batch 1, 2, 4; without and with full recomputation);
  2. predicted against measured for each iteration: uncalibrated (no profile), with the profile,
     with the profile and `calibrate` fitted to these runs (in-sample, and leave-one-out: each run
     predicted by a fit made without it).

Writes under --out as each part completes: MODEL.profile.yaml, MODEL.iterations.yaml, summary.md
and summary.json (the scenarios go to a temporary folder). `--device cpu` runs the same steps on tiny GPT and Llama models to prove
the script (its figures mean nothing). Run from the repository root:

  python3 docs/profiling_check.py --out /tmp/check              # on a GPU
  python3 docs/profiling_check.py --out /tmp/check --device cpu # anywhere with torch
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GPU_MODELS = {
    "gpt2-medium": {"preset": "gpt2-medium"},
    "llama3-8b-4layers": {"preset": "llama3-8b", "num_layers": 4, "sequence_length": 4096},
}
CPU_MODELS = {
    "gpt-tiny": {"family": "gpt", "name": "gpt-tiny", "hidden_size": 128, "num_layers": 2, "num_heads": 4,
                 "sequence_length": 64, "vocab_size": 1000},
    "llama-tiny": {"family": "llama", "name": "llama-tiny", "hidden_size": 128, "num_layers": 2, "num_heads": 4,
                   "num_kv_heads": 2, "sequence_length": 64, "vocab_size": 1000},
}


def scenario(model: dict, gpu: str, batch: int, profile: str | None = None) -> dict:
    return {"name": f"{model.get('name') or model.get('preset')} on one {gpu}",
            "cluster": {"nodes": [{"gpu": gpu, "count": 1, "gpus_per_node": 1, "intra_node_bandwidth": "900 GB/s",
                                   "inter_node_bandwidth": "50 GB/s"}]},
            "model": {**model, **({"profile": profile} if profile else {})},
            "training": {"global_batch_size": batch, "precision": "bf16", "framework": "pytorch", "optimizer": "adam"}}


def percent(predicted: float | None, measured: float) -> str:
    return "" if predicted is None else f"{(predicted / measured - 1) * 100:+.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--gpu", default="H200", help="the catalog GPU the scenario names (default H200)")
    parser.add_argument("--only", help="one case by name")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="amp-tui-check-"))     # the scenarios; --out keeps the results
    models = CPU_MODELS if args.device == "cpu" else GPU_MODELS
    rows, summary = [], {}
    began = time.perf_counter()
    for name, model in models.items():
        if args.only and name != args.only:
            continue
        try:
            check(name, model, args, out, work, rows, summary, began)
        except Exception as err:  # noqa: BLE001 - one case failing must not lose the other's figures
            import traceback

            traceback.print_exc()
            print(f"   {name} failed: {type(err).__name__}: {err}", flush=True)
    print(f"done in {time.perf_counter() - began:.0f} s; files in {out}", flush=True)
    return 0


def check(name, model, args, out, work, rows, summary, began) -> None:
    from amp_tui.cli.main import main as amp_tui
    from amp_tui.core.base.atomic import atomic_write
    from amp_tui.core.base.yamlio import dump_yaml
    from amp_tui.core.calibration.calibrate import calibrate
    from amp_tui.core.calibration.measurements import load_measurements
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import load_scenario

    batch = 8
    plain = work / f"{name}.scenario.yaml"
    atomic_write(plain, dump_yaml(scenario(model, args.gpu, batch)))
    profile, runs = out / f"{name}.profile.yaml", out / f"{name}.iterations.yaml"
    command = ["profile", str(plain), "-o", str(profile), "--tp", "1,2", "--micro-batch", "1,2,4",
               "--iterations", "--measurements", str(runs)]
    if args.device == "cpu":
        command += ["--device", "cpu", "--repeats", "2", "--warmups", "1"]
    else:
        command += ["--gpu", args.gpu]
    print(f"== {name}: amp-tui {' '.join(command)}", flush=True)
    status = amp_tui(command)
    if status:
        print(f"   profile exited {status}; skipping {name}", flush=True)
        return
    profiled = work / f"{name}.profiled.yaml"
    atomic_write(profiled, dump_yaml(scenario(model, args.gpu, batch, str(profile.resolve()))))
    base, with_profile = load_scenario(str(plain)), load_scenario(str(profiled))
    measurements = load_measurements(runs, base)
    fitted = calibrate(with_profile, load_measurements(runs, with_profile))
    fitted_plain = calibrate(base, measurements)
    by_index = {run.measurement.index: run for run in fitted.fit.runs}
    by_index_plain = {run.measurement.index: run for run in fitted_plain.fit.runs}
    case = []
    for m in measurements:
        if not m.timed:
            case.append({"micro_batch": m.strategy.micro_batch_size, "recompute": m.strategy.recompute,
                         "measured_s": None, "out_of_memory": True})
            continue
        run, run_plain = by_index.get(m.index), by_index_plain.get(m.index)
        entry = {"micro_batch": m.strategy.micro_batch_size, "recompute": m.strategy.recompute,
                 "measured_s": m.iteration_time_s,
                 "uncalibrated_s": evaluate(base, m.strategy).iteration_time_s,
                 "profile_s": evaluate(with_profile, m.strategy).iteration_time_s,
                 "calibrated_only_s": run_plain.predicted_s if run_plain else None,
                 "profile_calibrated_s": run.predicted_s if run else None,
                 "profile_calibrated_loo_s": run.loo_predicted_s if run else None,
                 "measured_peak_bytes": m.peak_memory_bytes}
        case.append(entry)
        rows.append((name, entry))
        print(f"   mbs {entry['micro_batch']} recompute {entry['recompute']}: measured "
              f"{entry['measured_s'] * 1e3:.1f} ms | uncalibrated {percent(entry['uncalibrated_s'], entry['measured_s'])}"
              f" | profile {percent(entry['profile_s'], entry['measured_s'])}"
              f" | profile+calibrate {percent(entry['profile_calibrated_s'], entry['measured_s'])}"
              f" (leave-one-out {percent(entry['profile_calibrated_loo_s'], entry['measured_s'])})", flush=True)
    summary[name] = {"runs": case, "fitted": fitted.scenario.calibration.to_dict(),
                     "fitted_without_profile": fitted_plain.scenario.calibration.to_dict()}
    write_summary(out, rows, summary, args, time.perf_counter() - began)


def write_summary(out: Path, rows, summary: dict, args, elapsed_s: float) -> None:
    from amp_tui.core.base.atomic import atomic_write

    lines = [f"# Predicted against measured iteration times ({args.device}, {args.gpu}; {elapsed_s:.0f} s)", "",
             "| model | mbs | recompute | measured | uncalibrated | profile | calibrate only | profile + calibrate "
             "| same, leave-one-out |", "|---|---|---|---|---|---|---|---|---|"]
    for name, e in rows:
        m = e["measured_s"]

        def cell(key):
            value = e.get(key)
            return "" if value is None else f"{value * 1e3:.1f} ms ({percent(value, m)})"
        lines.append(f"| {name} | {e['micro_batch']} | {e['recompute']} | {m * 1e3:.1f} ms | {cell('uncalibrated_s')} "
                     f"| {cell('profile_s')} | {cell('calibrated_only_s')} | {cell('profile_calibrated_s')} "
                     f"| {cell('profile_calibrated_loo_s')} |")
    for key in ("uncalibrated_s", "profile_s", "calibrated_only_s", "profile_calibrated_s", "profile_calibrated_loo_s"):
        errors = [abs(e[key] / e["measured_s"] - 1) for _, e in rows if e.get(key)]
        if errors:
            lines.append(f"- {key}: mean |error| {sum(errors) / len(errors) * 100:.1f}%, "
                         f"worst {max(errors) * 100:.1f}%")
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")
    atomic_write(out / "summary.json", json.dumps(summary, indent=2, default=lambda v: None if isinstance(v, float)
                                                  and math.isnan(v) else str(v)))


if __name__ == "__main__":
    sys.exit(main())
