"""A training log as a measured run: checked against the plan that ran, warm-up dropped, spread kept.

The plan (or scenario) says which strategy ran; what the log says of the run (its GPUs and
parallel degrees, micro-batch, global batch, sequence length, where it prints them) must agree,
else the log is of another run and is refused in one line. The first logged line (start-up, the
first iterations' compilation and allocation) and every line ending at or before `warmup`
iterations are dropped; the rest give the measurement: their median time per iteration, and their
spread (the standard deviation of the log of their times) as its uncertainty. A calibration from
one log carries a band of at least that spread: a fit cannot be surer than the run it fitted.
Peak memory is used where the log prints the fullest GPU's (Megatron-LM's per-rank reports), or a
GPU like every other (torchtitan's rank 0 without pipeline stages).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import format_bytes, format_seconds
from amp_tui.core.calibration.calibrate import Calibrated, calibrate
from amp_tui.core.calibration.logs import ENGINE_NAMES, EngineLog, Record
from amp_tui.core.calibration.measurements import Measurement
from amp_tui.core.spec.knobs import resolve
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy, parse_strategy
from amp_tui.core.spec.validity import validate_strategy

DEFAULT_WARMUP = 5        # iterations: compilation, allocator growth, NCCL set-up
MIN_STEADY = 2            # lines after the warm-up: a time and a spread
# The least uncertainty a logged time is given, in log units: the engines print milliseconds to
# one decimal or three figures, and identical lines would claim a certainty no run has.
MIN_LOG_SD = 0.002
FRAMEWORK_OF = {"megatron": "megatron", "deepspeed": "deepspeed", "torchtitan": "fsdp", "pytorch": "pytorch"}


@dataclass(frozen=True)
class LogMeasurement:
    log: EngineLog
    measurement: Measurement
    kept: tuple[Record, ...]
    dropped: int
    spread_log_sd: float          # sd of log(seconds) over the kept lines
    notes: tuple[str, ...]

    def describe(self) -> list[str]:
        m = self.measurement
        kept = self.kept
        lines = [f"read {self.log.source} ({ENGINE_NAMES[self.log.engine]}): {len(kept) + self.dropped} iteration lines "
                 f"up to iteration {kept[-1].step}; {self.dropped} dropped as warm-up, {len(kept)} kept: "
                 f"{format_seconds(m.iteration_time_s)} per iteration (median), spread "
                 f"{math.expm1(self.spread_log_sd) * 100:.1f}% (sd of the log of their times)"]
        if m.peak_memory_bytes is not None:
            lines.append(f"  peak memory {format_bytes(m.peak_memory_bytes)} ({self.log.memory_note})")
        lines += [f"  note: {note}" for note in self.notes]
        return lines


def strategy_from_log(log: EngineLog, scenario: Scenario) -> Strategy:
    """The strategy a log says it ran, for a scenario without a plan: Megatron-LM prints them all."""
    stated = log.stated
    missing = [k for k in ("tp", "pp", "dp", "micro_batch_size") if k not in stated]
    if missing:
        raise SpecError(log.source, ", ".join(missing), f"{ENGINE_NAMES[log.engine]}'s log does not say which "
                        "strategy ran; give the plan that ran it (amp-tui plan --save PLAN, then calibrate PLAN LOG)")
    value = {k: stated[k] for k in ("tp", "pp", "dp", "micro_batch_size")}
    if stated.get("cp", 1) != 1:
        value["cp"] = stated["cp"]
    strategy = parse_strategy(value, f"{log.source} (as it states)")
    gpus = strategy.tp * strategy.pp * strategy.dp * stated.get("cp", 1)
    if gpus != scenario.cluster.num_gpus:
        raise SpecError(log.source, f"{gpus} GPUs", f"ran on fewer or more than the scenario's "
                        f"{scenario.cluster.num_gpus}, and which the log does not say: give the plan that ran it")
    validate_strategy(scenario, strategy, f"{log.source} (as it states)")
    return strategy


def measure_log(log: EngineLog, scenario: Scenario, strategy: Strategy, warmup: int = DEFAULT_WARMUP
                ) -> LogMeasurement:
    if warmup < 0:
        raise SpecError("--warmup", warmup, "must be at least 0")
    knobs = resolve(strategy, scenario.training)
    cp = knobs.cp if isinstance(knobs.cp, int) else 1
    gpus = strategy.tp * strategy.pp * strategy.dp * cp
    label = strategy.label
    stated, notes = log.stated, []
    if "world_size" in stated and stated["world_size"] != gpus and log.engine != "deepspeed":
        raise SpecError(log.source, f"world size {stated['world_size']}",
                        f"the plan's strategy {label} runs on {gpus} GPUs: this log is of another run")
    wanted = {"tp": strategy.tp, "pp": strategy.pp, "dp": strategy.dp, "cp": cp,
              "micro_batch_size": strategy.micro_batch_size, "global_batch_size": scenario.training.global_batch_size,
              "seq_length": scenario.model.sequence_length}
    names = {"tp": "tensor-parallel size", "pp": "pipeline-parallel size", "dp": "data-parallel size",
             "cp": "context-parallel size", "micro_batch_size": "micro-batch size",
             "global_batch_size": "global batch size", "seq_length": "sequence length"}
    for key, want in wanted.items():
        if key in stated and stated[key] != want:
            raise SpecError(log.source, f"{names[key]} {stated[key]}",
                            f"the plan ran {names[key]} {want} ({label}, micro-batch {strategy.micro_batch_size}, "
                            f"global batch {scenario.training.global_batch_size}): this log is of another run")
    framework = FRAMEWORK_OF[log.engine]
    if framework != scenario.training.framework:
        notes.append(f"the plan prices a {scenario.training.framework} run and this is {ENGINE_NAMES[log.engine]}'s log: "
                     f"the fit lends the difference to {scenario.training.framework}'s parameters (training.framework: "
                     f"{framework} prices this engine)")
    records = sorted(log.records, key=lambda r: r.step)
    if log.engine == "torchtitan":
        records, notes = _titan_seconds(records, log, scenario, gpus, notes)
    first = records[0].step if records else 0
    kept = tuple(r for r in records if r.step > max(warmup, first) and r.seconds is not None and r.seconds > 0)
    if len(kept) < MIN_STEADY:
        cut = " It was cut short while written (its last line is incomplete)." if log.cut_short else ""
        raise SpecError(log.source, f"{len(kept)} iteration line{'s' if len(kept) != 1 else ''} after the warm-up",
                        f"at least {MIN_STEADY} are needed past the first line and iteration {warmup} (--warmup): "
                        f"log more often or longer.{cut}")
    if log.cut_short:
        notes.append("its last line was cut short while written: left out")
    times = [r.seconds for r in kept]
    logs = [math.log(t) for t in times]
    spread = statistics.stdev(logs)
    peak = _peak(log, strategy, kept, notes)
    measurement = Measurement(0, strategy, statistics.median(times), peak, time_log_sd=max(spread, MIN_LOG_SD))
    return LogMeasurement(log, measurement, kept, len(records) - len(kept), spread, tuple(notes))


def _titan_seconds(records: list[Record], log: EngineLog, scenario: Scenario, gpus: int, notes: list[str]):
    """torchtitan's tokens per second per GPU as seconds per step: tokens per step / (tps x GPUs)."""
    tokens = scenario.training.global_batch_size * scenario.model.sequence_length
    stated = log.stated.get("tokens_per_step")
    if stated is not None and stated != tokens:
        raise SpecError(log.source, f"{stated} tokens per train step", f"the plan's step is {tokens} tokens (global "
                        f"batch {scenario.training.global_batch_size} x {scenario.model.sequence_length}): "
                        "this log is of another run")
    if stated is None:
        notes.append(f"the log does not say its tokens per step: the plan's {tokens} (global batch x sequence) taken")
    if "world_size" not in log.stated:
        notes.append(f"the log does not say its device mesh: the plan's {gpus} GPUs taken")
    out = [replace(r, seconds=tokens / (r.tokens_per_s * gpus) if r.tokens_per_s else None) for r in records]
    return out, notes


def _peak(log: EngineLog, strategy: Strategy, kept: tuple[Record, ...], notes: list[str]) -> float | None:
    if log.peak_memory_bytes is not None:
        return log.peak_memory_bytes
    peaks = [r.peak_bytes for r in kept if r.peak_bytes is not None]
    if peaks and strategy.pp == 1:
        return max(peaks)
    if peaks or log.memory_note:
        notes.append(f"memory not calibrated: the log prints {log.memory_note}"
                     + (f", one of {strategy.pp} pipeline stages" if peaks else "") + ", not the fullest GPU's peak")
    return None


def calibrate_from_log(scenario: Scenario, measured: LogMeasurement) -> Calibrated:
    """The fit to one logged run, its band at least the log's spread."""
    result = calibrate(scenario, [measured.measurement], source=measured.log.source)
    calibration = result.scenario.calibration
    floor = max(calibration.residual_log_sd or 0.0, float(f"{measured.spread_log_sd:.4g}"))
    calibrated = replace(result.scenario, calibration=replace(calibration, residual_log_sd=floor))
    return replace(result, scenario=calibrated)
