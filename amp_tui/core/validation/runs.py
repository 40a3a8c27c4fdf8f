"""Published measured runs (amp_tui/data/measured_runs.yaml) as replay cases: each run's scenario,
strategy and measured figures, and the reasons it cannot be replayed faithfully yet.

A run is read as its source states it; where the source is silent, the case records the
assumption it makes (`assumptions`). A reason in `unsupported` is either a technique the cost
model does not honour yet (see HONOURED) or a gap in the run's own data.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from amp_tui.core.base.errors import SpecError, one_line
from amp_tui.core.base.limits import MAX_GPUS, MAX_RUNS_FILE_BYTES
from amp_tui.core.base.units import parse_int
from amp_tui.core.base.yamlio import read_text_file
from amp_tui.core.spec.hardware import gpu_catalog, instance_catalog
from amp_tui.core.spec.scenario import AUTO, Scenario, load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy, even_partition, per_stage_degrees, varying_degrees
from amp_tui.core.validation.cluster_labels import catalog_gpu, cluster_spec, gpu_mix
from amp_tui.core.validation.run_fields import normalized
from amp_tui.core.validation.training_labels import (
    model_flops_per_token,
    model_spec,
    read_attention_kernel,
    read_compile,
    read_framework,
    read_fused_loss,
    read_grad_reduce_in_fp32,
    read_precision,
    read_recompute,
    read_tf32,
    read_tp_comm_overlap,
    read_zero_stage,
)

# What the cost model honours today, per technique. The harness maps every run's techniques in
# full; widening one of these sets (e.g. adding "fp8" or 3) is all it takes to replay the runs
# that only needed that term.
HONOURED: dict[str, set] = {
    "precision": {"fp16", "bf16", "fp32", "tf32", "fp8", "fp4"},
    "recompute": {"none", "selective", "full", AUTO},
    "zero_stage": {0, 1, 2, 3},
    "sequence_parallel": {False, True},
    "cp": set(range(1, 65)),
    "virtual_stages": set(range(1, 65)),
    "ep": set(range(1, 65)),
}

RUNS_FILE = Path(__file__).resolve().parent.parent.parent / "data" / "measured_runs.yaml"

# Run-id prefix -> source key; the one place a run's source is named. AMP's other trials (its
# heterogeneous cluster and model) are "amp-heterogeneous" whatever their ids (_is_amp).
SOURCES = (("amp-homogeneous", "amp-homogeneous"), ("megatron-sc21", "megatron-sc21"),
           ("korthikanti", "korthikanti"), ("llmfoundry", "llmfoundry"), ("nemo", "nemo"),
           ("mbridge", "nemo"), ("torchtitan", "torchtitan"), ("llama3", "llama3"))
AMP_OTHER = "amp-heterogeneous"
SOURCE_KEYS = tuple(dict.fromkeys([key for _, key in SOURCES] + [AMP_OTHER]))

# AMP's trials replay the paper's presets, whose layer lists are AMP's pipeline entries with the
# times AMP measured: GPT-2 medium's 30 (paper-homogeneous) and the TransGAN generator's 56
# (paper-het-model), with DeepSpeed's training as AMP ran it, on the instances AMP ran (with the
# link figures of AMP's code).
AMP_SCENARIO = "paper-homogeneous"
AMP_MODEL_SCENARIOS = (("transgan", "paper-het-model"), ("", AMP_SCENARIO))
AMP_INSTANCES = {"T4": "g4dn.12xlarge", "V100": "p3.8xlarge"}

_GIB = 2**30
MEMORY_BASES = ("device", "reserved", "allocated")


def memory_basis(measured: dict, source: str, notes: list[str]) -> str:
    """What a run's peak memory counts, from its note (`peak_mem_note`, `memory_basis`):
    torch.cuda.max_memory_allocated, max_memory_reserved, or nvidia-smi (the device). torchtitan's
    tables are its memory monitor's max_reserved (components/metrics.py); unstated, the device's,
    what runs out."""
    text = " ".join([*(str(measured.get(k) or "") for k in ("memory_basis", "peak_mem_note")),
                     *(k for k in measured if k.startswith("max_memory_") and measured.get(k) is not None)]).lower()
    if "allocated" in text or "active" in text:
        return "allocated"
    if "reserved" in text:
        return "reserved"
    if re.search(r"nvidia-smi|rocm-smi|device|nvml", text):
        return "device"
    if source == "torchtitan":
        return "reserved"
    if measured.get("peak_mem_gb") is not None:
        notes.append("peak memory taken as the device's (nvidia-smi): the run does not say what it counts")
    return "device"
# Interleaving depth in the scenario of a run that does not state it; such runs are never replayed.
_UNSTATED_DEPTH = 2


@dataclass(frozen=True)
class Measured:
    iteration_time_s: float | None
    time_basis: str | None            # "measured", "derived", or how it was derived here
    peak_memory_bytes: float | None   # max over GPUs, where the source gives it
    out_of_memory: bool               # the run failed or ran out of memory
    # What the peak counts (MEMORY_BASES): everything the process holds on the GPU ("device",
    # nvidia-smi), PyTorch's caching allocator ("reserved") or its tensors ("allocated").
    memory_basis: str = "device"


@dataclass(frozen=True)
class ReplayCase:
    id: str
    source: str                       # one of SOURCE_KEYS
    group: str                        # runs whose strategies are ranked against each other
    gpu: str                          # the run's GPU label; `scenario` holds the catalog entry
    heterogeneous: bool
    # The techniques as the run used them, whether or not the cost model honours them.
    precision: str                    # fp16 | bf16 | fp32 | fp8 | fp4
    recompute: str                    # none | selective | full | auto (not stated)
    zero_stage: int                   # 0..3 (1: distributed optimizer, 3: FSDP full shard)
    sequence_parallel: bool
    cp: int
    virtual_stages: int | None        # None: interleaved, depth not stated
    ep: int
    scenario: Scenario | None         # None when the run cannot be built (see data_gaps)
    strategy: Strategy | None
    measured: Measured
    amp_predicted_s: float | None     # AMP's own prediction, for its homogeneous runs
    assumptions: tuple[str, ...] = ()
    data_gaps: tuple[str, ...] = ()   # what the run lacks for a faithful replay


def source_key(run: dict) -> str:
    run_id = str(run.get("id", ""))
    for prefix, key in SOURCES:
        if run_id.startswith(prefix):
            return key
    if _is_amp(run):
        return AMP_OTHER
    title = str((run.get("source") or {}).get("title") or "other")
    return re.sub(r"[^a-z0-9]+", "-", title.lower().split(",")[0]).strip("-")[:24]


def unsupported(case: ReplayCase, honoured: dict[str, set] | None = None) -> list[str]:
    """Why the case cannot be replayed faithfully: techniques outside `honoured` (default
    HONOURED), then gaps in the run's own data. Empty: replay it."""
    honoured = HONOURED if honoured is None else honoured
    reasons = []
    if case.precision not in honoured["precision"]:
        reasons.append(f"needs {case.precision}")
    if case.recompute not in honoured["recompute"]:
        reasons.append(f"needs {case.recompute} recomputation")
    if case.zero_stage not in honoured["zero_stage"]:
        reasons.append("needs ZeRO-3 / FSDP" if case.zero_stage == 3 else f"needs ZeRO-{case.zero_stage}")
    if case.sequence_parallel not in honoured["sequence_parallel"]:
        reasons.append("needs sequence parallelism")
    if case.cp not in honoured["cp"]:
        reasons.append("needs context parallelism")
    if case.virtual_stages is not None and case.virtual_stages not in honoured["virtual_stages"]:
        reasons.append("needs the interleaved schedule")   # (None: a data gap, the depth not stated)
    if case.ep not in honoured["ep"]:
        reasons.append("needs expert parallelism")
    return reasons + list(case.data_gaps)


def _is_amp(run: dict) -> bool:
    """A trial from AMP's experiment logs: its id says so, or its stages are given over AMP's
    pipeline entries, or its source is the AMP paper."""
    title = str((run.get("source") or {}).get("title") or "")
    return (re.match(r"amp[-_]", str(run.get("id", "")), re.IGNORECASE) is not None
            or "stage_bounds_over_amp_entries" in (run.get("training") or {})
            or bool(re.search(r"\bAMP\b.*NeurIPS 2022", title)))


def is_model_gap(reason: str) -> bool:
    """A reason the cost model can remove (a technique to honour), not a gap in the run's data."""
    return reason.startswith(("needs ", "cannot be evaluated"))


# -- loading ----------------------------------------------------------------------------------

@cache
def load_runs(path: Path = RUNS_FILE) -> tuple[dict, ...]:
    """The runs of a measured-runs file (parsed with libyaml where present: the file is large)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = read_text_file(Path(path), "measured runs", MAX_RUNS_FILE_BYTES)    # (a regular file, bounded)
    try:
        # An alias is one shared object here, never copied: only the fields a run is read by are visited.
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except RecursionError:
        raise SpecError("measured runs", Path(path), "malformed YAML: nested too deeply") from None
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise SpecError("measured runs", Path(path), f"malformed YAML: {str(exc).splitlines()[0][:100]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise SpecError("measured runs", Path(path), "expected a mapping with a `runs` list")
    return tuple(data["runs"])


def load_cases(path: Path = RUNS_FILE) -> list[ReplayCase]:
    """Every run of the file as a replay case (scenarios shared between runs that describe the same
    cluster, model and training)."""
    return cases_of(load_runs(path))


def cases_of(runs) -> list[ReplayCase]:
    """Runs as replay cases; a run with a field this harness cannot read is kept out with why."""
    scenarios: dict[str, Scenario] = {}
    cases = []
    for index, run in enumerate(runs):
        if not isinstance(run, dict):
            raise SpecError(f"runs[{index}]", run, "expected a mapping (id, model, cluster, training, measured)")
        try:
            cases.append(parse_run(run, scenarios))
        except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:   # a field not read
            cases.append(_unreadable(run, index, exc))
    return cases


def _unreadable(run: dict, index: int, exc: Exception) -> ReplayCase:
    """A run with a field this harness cannot read (e.g. a list where it reads a number): kept
    out of the replay, with why, so that the others are still scored."""
    reason = one_line(f"cannot be read: {type(exc).__name__}: {exc}", 120)
    return ReplayCase(id=str(run.get("id", f"runs[{index}]")), source=source_key(run),
                      group=str(run.get("group") or "unreadable"), gpu="", heterogeneous=False, precision="fp16",
                      recompute="none", zero_stage=0, sequence_parallel=False, cp=1, virtual_stages=1, ep=1,
                      scenario=None, strategy=None, measured=Measured(None, None, None, False),
                      amp_predicted_s=None, data_gaps=(reason,))


# -- one run ----------------------------------------------------------------------------------

def parse_run(run: dict, scenarios: dict[str, Scenario] | None = None) -> ReplayCase:
    """One run as a replay case; `scenarios` caches built scenarios by their spec."""
    scenarios = {} if scenarios is None else scenarios
    notes: list[str] = []
    gaps: list[str] = []
    run = normalized(run, notes)      # other tools' field names, and the defaults of silent fields
    model, cluster = run["model"], run["cluster"]
    training, measured = run["training"], run["measured"]
    source = source_key(run)

    precision = read_precision(training.get("precision"), notes)
    fp8_scaling = "rowwise" if precision == "fp8" and "rowwise" in str(training.get("precision")).lower() \
        else "tensorwise"
    recompute = read_recompute(training.get("recompute"), notes)
    zero_stage = read_zero_stage(training.get("zero"))
    # Degrees and batches as whole numbers within the limits (a run that states 0 or 10^30 is
    # kept out with why, _unreadable, rather than divided by or enumerated).
    pp, cp, ep = (parse_int(1 if training.get(k) is None else training.get(k), f"training.{k}",
                            maximum=MAX_GPUS) for k in ("pp", "cp", "ep"))
    tps, dps, pp = _stage_degrees(training, pp)
    tp, dp = max(tps), max(dps)
    shares = training.get("batch_shares")
    if shares is not None:
        if not isinstance(shares, list) or not shares or len(shares) > MAX_GPUS:
            raise SpecError("training.batch_shares", shares, "expected a list of samples per data-parallel replica")
        shares = tuple(parse_int(n, f"training.batch_shares[{i}]") for i, n in enumerate(shares))
    if len(set(tps)) > 1 or len(set(dps)) > 1 or shares:
        notes.append("per-stage degrees or batch shares: micro_batch read as one replica's samples "
                     "(on the stage with the most replicas), as in a strategy file")
    sequence_parallel = training.get("sp")
    if sequence_parallel is None:
        # torchtitan's tensor-parallel plan shards the norms along the sequence, which is SP.
        sequence_parallel = source == "torchtitan" and tp > 1
        if sequence_parallel:
            notes.append("sequence parallelism: torchtitan's tensor-parallel plan uses it")
    vpp = training.get("vpp")
    virtual_stages = int(vpp) if isinstance(vpp, int) else (1 if vpp is None else None)
    if source == "torchtitan" and vpp is None and pp > 1 and "interleaved" in str(
            (run.get("source") or {}).get("quote") or "").lower():
        # torchtitan's generate_split_points: a multi-stage schedule without split points gets
        # 2 stages per rank.
        virtual_stages = 2
        notes.append("interleaved 1F1B: torchtitan's default of 2 stages per rank")
    if pp == 1 and virtual_stages != 1:
        notes.append(f"interleaving ({vpp}) without pipeline stages: none")
        virtual_stages = 1
    if virtual_stages is None:
        gaps.append("interleaving depth not stated")

    mbs, gbs = training.get("micro_batch"), training.get("global_batch")
    if source == "torchtitan":
        mbs, gbs = _torchtitan_batches(mbs, gbs, dp, pp, notes)
    if mbs is None:
        mbs = 1
        notes.append("micro-batch size not stated: 1 assumed")
    mbs = parse_int(mbs, "training.micro_batch")
    gbs = None if gbs is None else parse_int(gbs, "training.global_batch")
    num_gpus = parse_int(cluster.get("num_gpus") or 0, "cluster.num_gpus", minimum=0, maximum=MAX_GPUS)
    if cp * sum(t * d for t, d in zip(tps, dps)) != num_gpus:
        gaps.append("parallel degrees do not multiply to the stated GPU count")
    if gbs is None:
        gaps.append("global batch not stated")

    time_s, basis = _iteration_time(run, gbs, num_gpus)
    if time_s is not None and not (math.isfinite(time_s) and time_s > 0):
        gaps.append(f"iteration time {time_s:g} s is not a positive number")
        time_s = basis = None
    oom = bool(measured.get("oom") or measured.get("failed"))
    if time_s is None and not oom:
        what = (model.get("notes") or "").split(",")[0]
        gaps.append("no iteration time" + (f" ({what})" if what else ""))
    peak = measured.get("peak_mem_gb")
    if peak is not None and not (isinstance(peak, (int, float)) and math.isfinite(peak) and peak > 0):
        gaps.append(f"peak memory {peak!r} GB is not a positive number")
        peak = None
    case_measured = Measured(
        iteration_time_s=time_s, time_basis=basis, out_of_memory=oom,
        memory_basis=memory_basis(measured, source, notes),
        # torchtitan's memory figures are GiB (footnote 1 of its tables).
        peak_memory_bytes=float(peak) * _GIB if peak is not None else None)

    gpu_label = str(cluster.get("gpu") or "")
    scenario = strategy = None
    if gbs is not None:
        try:
            if source in ("amp-homogeneous", AMP_OTHER):
                scenario, partition = _amp_scenario(run, gbs, pp, scenarios, notes)
            else:
                framework = read_framework(training.get("framework"), notes)
                nodes = cluster_spec(cluster, notes)
                precision = _supported_precision(read_tf32(precision, training, framework, notes), nodes, notes)
                spec = {"name": f"{model.get('name')} on {cluster.get('name')}",
                        "cluster": nodes,
                        "model": model_spec(model, training, notes),
                        "training": {"global_batch_size": int(gbs), "precision": precision,
                                     "recompute": recompute, "zero_stage": zero_stage,
                                     "sequence_parallel": bool(sequence_parallel), "context_parallel": cp,
                                     "virtual_stages": virtual_stages or _UNSTATED_DEPTH,
                                     "framework": framework,
                                     "compile": read_compile(run, notes),
                                     "fused_loss": read_fused_loss(source, notes),
                                     "attention_kernel": read_attention_kernel(source, notes, framework),
                                     "fp8_scaling": fp8_scaling,
                                     "tp_comm_overlap": read_tp_comm_overlap(run, tp)}}
                reduce_fp32 = read_grad_reduce_in_fp32(run, source, notes)
                if reduce_fp32 is not None:
                    spec["training"]["grad_reduce_in_fp32"] = reduce_fp32
                scenario = _shared_scenario(spec, scenarios)
                partition = _partition(scenario, pp, training, notes)
            strategy = Strategy(tp=tp, pp=pp, dp=dp, micro_batch_size=int(mbs), partition=partition,
                                recompute=None if recompute == AUTO else recompute, zero_stage=zero_stage,
                                sequence_parallel=bool(sequence_parallel), cp=cp,
                                virtual_stages=virtual_stages or _UNSTATED_DEPTH,
                                stage_tp=varying_degrees(tps), stage_dp=varying_degrees(dps), batch_shares=shares)
            if zero_stage <= 1 and not oom and _cannot_hold_weights(scenario, tp * pp * ep):
                gaps.append("stated degrees cannot hold the 16-bit weights and gradients (ZeRO-3 / FSDP not stated?)")
        except SpecError as err:
            gaps.append(f"cannot be built: {err}")
            scenario = strategy = None
    return ReplayCase(
        id=str(run.get("id")), source=source, gpu=gpu_label,
        group=str(run.get("group") or f"{source}: {model.get('name')} on {cluster.get('name')}"),
        heterogeneous=bool(cluster.get("heterogeneous")) or (
            scenario is not None and len({g.gpu.name for g in scenario.cluster.nodes}) > 1),
        precision=precision, recompute=recompute,
        zero_stage=zero_stage, sequence_parallel=bool(sequence_parallel), cp=cp, virtual_stages=virtual_stages,
        ep=ep, scenario=scenario, strategy=strategy, measured=case_measured,
        amp_predicted_s=run.get("amp_predicted_iteration_time_s"), assumptions=tuple(notes), data_gaps=tuple(gaps))


def _supported_precision(precision: str, cluster: dict, notes: list[str]) -> str:
    """bf16 on a GPU without bf16 tensor cores (Volta, Turing) runs as autocast emulates it: at the
    fp16 rate, which is how it is replayed (and said)."""
    names = [node["gpu"] if isinstance(node["gpu"], str) else node["gpu"]["base"] for node in cluster["nodes"]]
    lacking = [name for name in names if not gpu_catalog()[name].supports(precision)]
    if precision == "bf16" and lacking and all("fp16" in gpu_catalog()[name].precisions for name in names):
        notes.append(f"bf16 on {lacking[0]} (no bf16 tensor cores): replayed as fp16")
        return "fp16"
    return precision


def _stage_degrees(training: dict, pp: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(tp per stage, dp per stage, pp): `tp` and `dp` are numbers, or lists of one per stage (a
    planner that gives the stages on each GPU type their own degrees, as in a strategy file);
    with a list, pp is its length where the run does not state it."""
    lists = [training[k] for k in ("tp", "dp") if isinstance(training.get(k), list)]
    if lists and training.get("pp") is None:
        pp = parse_int(len(lists[0]), "training.pp", maximum=MAX_GPUS)
    tps, dps = (per_stage_degrees(1 if training.get(k) is None else training[k], pp, f"training.{k}", MAX_GPUS)
                for k in ("tp", "dp"))
    return (tps * pp if len(tps) < pp else tps), (dps * pp if len(dps) < pp else dps), pp


def _cannot_hold_weights(scenario: Scenario, model_split: int) -> bool:
    """Whether every GPU would need more than its memory for its share of the 16-bit weights and
    gradients alone: a run that ran so stated has left its sharding out of the record."""
    e = scenario.training.bytes_per_element
    smallest = min(group.gpu.usable_memory_bytes for group in scenario.cluster.nodes)
    return scenario.model.total_params * 2 * e / model_split > smallest


# Engines that split the layers evenly whatever the GPUs: a run by one of these (and by no system
# named for heterogeneous clusters) keeps Megatron's default split on a mixed cluster too.
_EVEN_SPLIT = ("megatron", "nemo", "deepspeed", "torchtitan", "fsdp", "composer", "llm-foundry", "pytorch")
_HETEROGENEITY_AWARE = re.compile(r"\b(amp|metis|hetpipe|whale|sailor|flashflex|cephalo|hexiscale|poplar|sdpipe|"
                                  r"holmes|accpar|hetero\w*)\b")


def _partition(scenario: Scenario, pp: int, training: dict, notes: list[str]) -> tuple[int, ...] | None:
    """The layers per stage a run used: the transformer blocks per stage it states
    (`layers_per_stage`, the embedding going with the first and the head with the last), else on a
    cluster of one GPU type Megatron's default split; on mixed GPUs, unless an even-splitting
    engine ran it, None: the best partition for its degrees (evaluate), as a planner for
    heterogeneous clusters balances its stages (an even split there is what a baseline runs)."""
    stated = training.get("layers_per_stage")
    if stated is not None:
        return megatron_partition(scenario, pp, blocks_per_stage=stated)
    framework = str(training.get("framework") or "").lower()
    aware = _HETEROGENEITY_AWARE.search(framework) is not None
    if len({group.gpu.name for group in scenario.cluster.nodes}) > 1 and (
            aware or not any(word in framework for word in _EVEN_SPLIT)):
        notes.append("partition not stated, on mixed GPUs: the best for its degrees (a planner for "
                     "heterogeneous clusters balances its stages)")
        return None
    return megatron_partition(scenario, pp)


def megatron_partition(scenario: Scenario, pp: int, blocks_per_stage=None) -> tuple[int, ...]:
    """Megatron's default split: the blocks evenly over the stages (or `blocks_per_stage`, as a
    run states them), the embedding on the first and the head on the last (models without
    blocks: every layer evenly)."""
    kinds = [layer.kind for layer in scenario.model.layers]
    blocks = kinds.count("block")
    if blocks_per_stage is None and blocks < pp:
        return even_partition(len(kinds), pp)
    before = kinds.index("block") if blocks else 0
    split = list(even_partition(blocks, pp) if blocks_per_stage is None else blocks_per_stage)
    if not (len(split) == pp and all(isinstance(n, int) and n >= 0 for n in split) and sum(split) == blocks):
        raise SpecError("training.layers_per_stage", blocks_per_stage,
                        f"expected {pp} counts of transformer blocks adding up to {blocks}")
    split[0] += before
    split[-1] += len(kinds) - before - blocks
    if min(split) < 1:
        raise SpecError("training.layers_per_stage", blocks_per_stage, "leaves a stage without layers")
    return tuple(split)


def _shared_scenario(spec: dict, scenarios: dict[str, Scenario]) -> Scenario:
    key = json.dumps(spec, sort_keys=True, default=str)
    if key not in scenarios:
        scenarios[key] = parse_scenario(spec)
    return scenarios[key]


def _amp_scenario(run: dict, gbs, pp: int, scenarios: dict, notes: list[str]
                  ) -> tuple[Scenario, tuple[int, ...] | None]:
    """An AMP trial's scenario (AMP_MODEL_SCENARIOS: the paper preset of its model, on the nodes
    the run names, _amp_nodes) and its partition (its stage bounds over AMP's entries; None, the
    best for its degrees, where it states none)."""
    name = str((run.get("model") or {}).get("name") or "").lower()
    preset = next(preset for word, preset in AMP_MODEL_SCENARIOS if word in name)
    nodes = _amp_nodes(run.get("cluster") or {})
    key = ("amp", preset, nodes, None if gbs is None else int(gbs))
    if key not in scenarios:
        if preset not in scenarios:
            scenarios[preset] = load_scenario(preset)
        base = scenarios[preset]
        if nodes != tuple((g.instance, g.count) for g in base.cluster.nodes):
            label = " + ".join(f"{count} x {instance}" for instance, count in nodes)
            base = parse_scenario({**base.to_dict(), "name": f"{base.model.name} on {label}",
                                   "cluster": {"name": label, "nodes": [{"instance": instance, "count": count}
                                                                         for instance, count in nodes]}})
        if gbs is not None and int(gbs) != base.training.global_batch_size:
            base = base.with_training(global_batch_size=int(gbs))
        scenarios[key] = base
    scenario = scenarios[key]
    bounds = (run.get("training") or {}).get("stage_bounds_over_amp_entries")
    if bounds is None:          # AMP chose its partitions with its own search: the best for the degrees
        notes.append("stage bounds not stated: the best partition for its degrees (AMP searches them)")
        return scenario, None
    if not isinstance(bounds, list) or len(bounds) != pp + 1 or bounds[0] != 0 \
            or bounds[-1] != scenario.model.num_layers or sorted(bounds) != bounds:
        raise SpecError("training.stage_bounds_over_amp_entries", bounds,
                        f"expected {pp + 1} rising bounds from 0 to {scenario.model.num_layers}")
    return scenario, tuple(b - a for a, b in zip(bounds, bounds[1:]))


def _amp_nodes(cluster: dict) -> tuple[tuple[str, int], ...]:
    """The (instance, count) node groups of an AMP trial, in the order ranks fill them: from its
    `gpu_mix` (each GPU type on AMP's instance of it, AMP_INSTANCES), else the instances its name
    lists ('3 x AWS p3.8xlarge + 1 x AWS g4dn.12xlarge'), else its one GPU type."""
    num_gpus = int(cluster.get("num_gpus") or 0)
    catalog = instance_catalog()
    named = [(instance, int(count)) for count, instance in
             re.findall(r"(\d+)\s*(?:x|\u00d7)\s*(?:AWS\s+)?([\w.-]+)", str(cluster.get("name") or ""))
             if instance in catalog]
    mix = gpu_mix(cluster.get("gpu_mix"))
    if not mix and named and sum(catalog[i]["gpus_per_node"] * n for i, n in named) == num_gpus:
        return tuple(named)
    nodes = []
    for entry in mix or [{"gpu": cluster.get("gpu"), "num_gpus": num_gpus}]:
        gpu = catalog_gpu(str(entry.get("gpu") or ""))
        if gpu not in AMP_INSTANCES:
            raise SpecError("cluster.gpu", entry.get("gpu"), f"AMP's trials ran on {' and '.join(AMP_INSTANCES)} only")
        instance = AMP_INSTANCES[gpu]
        per_node = catalog[instance]["gpus_per_node"]
        if entry["num_gpus"] % per_node:
            raise SpecError("cluster.num_gpus", entry["num_gpus"], f"not whole {instance} nodes of {per_node} GPUs")
        nodes.append((instance, entry["num_gpus"] // per_node))
    return tuple(nodes)


# -- techniques as the sources name them ------------------------------------------------------


def _torchtitan_batches(local, gbs, dp: int, pp: int, notes: list[str]):
    """torchtitan states the batch per data-parallel rank and does not accumulate gradients; its
    2024 pipeline schedules split that batch into pp micro-batches."""
    if local is None:
        local = 1
        notes.append("local batch not stated: 1 assumed (the smallest, so predicting out of memory is the hard call)")
    if gbs is None:
        gbs = int(local) * dp
        notes.append(f"global batch: local batch {local} x dp {dp}")
    mbs = int(local)
    if pp > 1 and mbs % pp == 0:
        mbs //= pp
        notes.append(f"micro-batch: local batch {local} / pp {pp} (torchtitan's default micro-batch count)")
    return mbs, gbs


# -- measured time ----------------------------------------------------------------------------

def _iteration_time(run: dict, gbs, num_gpus: int) -> tuple[float | None, str | None]:
    measured, derived = run.get("measured") or {}, run.get("derived") or {}
    if measured.get("iteration_time_s"):
        return float(measured["iteration_time_s"]), "measured"
    if derived.get("iteration_time_s"):
        return float(derived["iteration_time_s"]), "derived"
    if derived.get("iteration_time_s_approx"):
        return float(derived["iteration_time_s_approx"]), "derived (approximate)"
    seq = (run.get("model") or {}).get("seq_len")
    if gbs and _positive(measured.get("samples_per_s")):
        return gbs / measured["samples_per_s"], "derived here from samples/s"
    if gbs and seq and _positive(measured.get("tokens_per_s")):
        return gbs * seq / measured["tokens_per_s"], "derived here from tokens/s"
    if gbs and seq and num_gpus and measured.get("tokens_per_s_per_gpu"):
        return gbs * seq / (measured["tokens_per_s_per_gpu"] * num_gpus), "derived here from tokens/s per GPU"
    if gbs and seq and num_gpus and measured.get("tflops_per_gpu"):
        flops = gbs * seq * model_flops_per_token(run.get("model") or {})
        if flops:
            return flops / (measured["tflops_per_gpu"] * 1e12 * num_gpus), \
                "derived here from model TFLOP/s (NeMo's model-FLOPs convention)"
    return None, None


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


# -- model and cluster specs ------------------------------------------------------------------
