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
from amp_tui.core.spec.hardware import gpu_catalog, instance_catalog
from amp_tui.core.base.limits import MAX_GPUS, MAX_RUNS_FILE_BYTES
from amp_tui.core.spec.scenario import AUTO, Scenario, load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy, even_partition, per_stage_degrees, varying_degrees
from amp_tui.core.base.units import parse_bandwidth, parse_int
from amp_tui.core.base.yamlio import read_text_file

# What the cost model honours today, per technique. The harness maps every run's techniques in
# full; widening one of these sets (e.g. adding "fp8" or 3) is all it takes to replay the runs
# that only needed that term.
HONOURED: dict[str, set] = {
    "precision": {"fp16", "bf16", "fp32", "fp8", "fp4"},
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
# Interleaving depth in the scenario of a run that does not state it; such runs are never replayed.
_UNSTATED_DEPTH = 2


@dataclass(frozen=True)
class Measured:
    iteration_time_s: float | None
    time_basis: str | None            # "measured", "derived", or how it was derived here
    peak_memory_bytes: float | None   # max over GPUs, where the source gives it
    out_of_memory: bool               # the run failed or ran out of memory


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
    model, cluster = run.get("model") or {}, run.get("cluster") or {}
    training, measured = run.get("training") or {}, run.get("measured") or {}
    notes: list[str] = []
    gaps: list[str] = []
    source = source_key(run)

    precision = _precision(training.get("precision"))
    fp8_scaling = "rowwise" if precision == "fp8" and "rowwise" in str(training.get("precision")).lower() \
        else "tensorwise"
    recompute = _recompute(training.get("recompute"), notes)
    zero_stage = _zero_stage(training.get("zero"))
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
        # torchtitan's memory figures are GiB (footnote 1 of its tables).
        peak_memory_bytes=float(peak) * _GIB if peak is not None else None)

    gpu_label = str(cluster.get("gpu") or "")
    scenario = strategy = None
    if gbs is not None:
        try:
            if source in ("amp-homogeneous", AMP_OTHER):
                scenario, partition = _amp_scenario(run, gbs, pp, scenarios, notes)
            else:
                spec = {"name": f"{model.get('name')} on {cluster.get('name')}",
                        "cluster": _cluster_spec(cluster, notes),
                        "model": _model_spec(model, training, notes),
                        "training": {"global_batch_size": int(gbs), "precision": precision,
                                     "recompute": recompute, "zero_stage": zero_stage,
                                     "sequence_parallel": bool(sequence_parallel), "context_parallel": cp,
                                     "virtual_stages": virtual_stages or _UNSTATED_DEPTH,
                                     "framework": _framework(training.get("framework")),
                                     "fused_loss": _fused_loss(source, notes),
                                     "attention_kernel": _attention_kernel(source, notes),
                                     "fp8_scaling": fp8_scaling,
                                     "tp_comm_overlap": _tp_comm_overlap(run, tp)}}
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
    mix = _gpu_mix(cluster.get("gpu_mix"))
    if not mix and named and sum(catalog[i]["gpus_per_node"] * n for i, n in named) == num_gpus:
        return tuple(named)
    nodes = []
    for entry in mix or [{"gpu": cluster.get("gpu"), "num_gpus": num_gpus}]:
        gpu = _catalog_gpu(str(entry.get("gpu") or ""))
        if gpu not in AMP_INSTANCES:
            raise SpecError("cluster.gpu", entry.get("gpu"), f"AMP's trials ran on {' and '.join(AMP_INSTANCES)} only")
        instance = AMP_INSTANCES[gpu]
        per_node = catalog[instance]["gpus_per_node"]
        if entry["num_gpus"] % per_node:
            raise SpecError("cluster.num_gpus", entry["num_gpus"], f"not whole {instance} nodes of {per_node} GPUs")
        nodes.append((instance, entry["num_gpus"] // per_node))
    return tuple(nodes)


# -- techniques as the sources name them ------------------------------------------------------

def _framework(label) -> str:
    """Which conventions the run's trainer follows (scenario.FRAMEWORKS): the engine that holds and
    reduces the gradients, DeepSpeed's when it is named beside Megatron-LM's model code."""
    text = str(label or "").lower()
    if "fsdp" in text or "torchtitan" in text or "composer" in text:
        return "fsdp"
    if "deepspeed" in text:
        return "deepspeed"
    return "megatron"


def _precision(label) -> str:
    text = str(label or "").lower()
    if "fp4" in text:
        return "fp4"
    if "fp8" in text or "float8" in text:
        return "fp8"
    if "bf16" in text or "bfloat16" in text:
        return "bf16"
    if "fp32" in text and "16" not in text:
        return "fp32"
    return "fp16"   # "mixed", "mixed fp16": Megatron-LM's fp16 mixed precision


def _recompute(label, notes: list[str]) -> str:
    text = str(label or "").lower()
    if text.startswith("selective") or "(selective)" in text:
        return "selective"
    if text.startswith("full"):
        return "full"
    if text == "no" or text.startswith("none"):
        return "none"
    # A recipe that does not say is tuned to fit: replay takes the fastest kind that fits.
    notes.append(f"recomputation {label or 'not stated'}: the fastest of none, selective and full that fits")
    return AUTO


def _attention_kernel(source: str, notes: list[str]) -> str:
    """llm-foundry's MPT runs attention through the flash-attn 2 package (`attn_impl: flash`, or
    Triton's flash attention for ALiBi); NeMo and Megatron-LM use Transformer Engine's fused
    attention, torchtitan PyTorch's SDPA (cuDNN's kernel on Hopper)."""
    if source == "llmfoundry":
        notes.append("attention: llm-foundry's FlashAttention-2 kernels")
        return "flash2"
    return "fused"


def _fused_loss(source: str, notes: list[str]) -> bool:
    """llm-foundry's MPT computes its loss with flash-attn's fused cross-entropy (its `loss_fn`
    default, `fused_crossentropy`), which writes the gradient into the logits in place."""
    if source == "llmfoundry":
        notes.append("loss: llm-foundry's default fused cross-entropy")
        return True
    return False


def _tp_comm_overlap(run: dict, tp: int) -> bool:
    """NeMo's recipes state TP communication overlap; torchtitan's async-TP rows say AsyncTP in
    their id, notes or quoted row."""
    text = " ".join(str(x) for x in ((run.get("training") or {}).get("notes"),
                                     (run.get("source") or {}).get("quote"))).lower()
    return tp > 1 and ("async_tp" in str(run.get("id")).lower()
                       or any(word in text for word in ("tp comm overlap", "asynctp", "async tp")))


def _zero_stage(label) -> int:
    text = str(label or "").lower()
    if "shard_grad_op" in text or "params kept after forward" in text:
        return 2
    if "fsdp" in text or "zero-3" in text:
        return 3
    if "distributed optimizer" in text:
        return 1
    return 0


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
    if gbs and seq and num_gpus and measured.get("tokens_per_s_per_gpu"):
        return gbs * seq / (measured["tokens_per_s_per_gpu"] * num_gpus), "derived here from tokens/s per GPU"
    if gbs and seq and num_gpus and measured.get("tflops_per_gpu"):
        flops = gbs * seq * _model_flops_per_token(run.get("model") or {})
        if flops:
            return flops / (measured["tflops_per_gpu"] * 1e12 * num_gpus), \
                "derived here from model TFLOP/s (NeMo's model-FLOPs convention)"
    return None, None


def _model_flops_per_token(model: dict) -> float:
    """Training model FLOPs per token as NeMo counts them: 3 passes x 2 FLOPs per multiply-add of the
    matrix multiplies, and attention's 12 l h s (causal masking not discounted)."""
    try:
        h, l, a, s = (int(model[k]) for k in ("hidden", "layers", "heads", "seq_len"))
        kv, f, v = int(model.get("kv_heads") or a), int(model["ffn"]), int(model["vocab"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    if min(h, l, a, s, kv, f, v) <= 0:
        return 0.0
    gated = "llama" in str(model.get("name", "")).lower()
    per_layer = 2 * h * h + 2 * h * (h * kv // a) + (3 if gated else 2) * h * f
    return 6.0 * (l * per_layer + v * h) + 12.0 * l * h * s


# -- model and cluster specs ------------------------------------------------------------------

_FLASH_FREE_FRAMEWORKS = ("megatron-lm (2021", "megatron-lm (2022", "deepspeed pipeline")
_VOCAB_NAMES = {"gpt-2 bpe": 50257}


def _model_spec(model: dict, training: dict, notes: list[str]) -> dict:
    name = str(model.get("name") or "model")
    family = "llama" if "llama" in name.lower() else "gpt"
    vocab = model.get("vocab")
    if not isinstance(vocab, int):
        known = next((n for key, n in _VOCAB_NAMES.items() if key in str(vocab).lower()), None)
        if known is None:
            raise SpecError("model.vocab", vocab, "not a vocabulary size")
        notes.append(f"vocabulary {vocab!r}: {known}")
        vocab = known
    framework = str(training.get("framework") or "").lower()
    spec = {"family": family, "name": name, "hidden_size": model.get("hidden"), "num_layers": model.get("layers"),
            "num_heads": model.get("heads"), "sequence_length": model.get("seq_len"), "vocab_size": vocab,
            "flash_attention": not framework.startswith(_FLASH_FREE_FRAMEWORKS)}
    if model.get("kv_heads"):
        spec["num_kv_heads"] = model["kv_heads"]
    if model.get("ffn"):
        spec["ffn_hidden_size"] = model["ffn"]
    return spec


# Catalog GPU per run label, first match wins.
_GPU_LABELS = (("GB300", "GB300"), ("GB200", "GB200"), ("B200", "B200"), ("GH200", "GH200"), ("H200", "H200"),
               (r"\bH20\b", "H20"), ("H100.*PCIe", "H100-PCIe"), ("H100.*96.*500 ?W", "H100-96GB-500W"),
               ("H100|H800", "H100"), ("A100.*40GB", "A100-40GB"),
               ("A100|A800", "A100-80GB"), ("4090", "RTX-4090"), ("3090", "RTX-3090"), ("3080", "RTX-3080"),
               ("RTX 6000 Ada|6000 Ada", "RTX-6000-Ada"), ("A6000", "RTX-A6000"), ("A5000", "RTX-A5000"),
               (r"\bA40\b", "A40"), (r"\bA30\b", "A30"), ("L40S", "L40S"), (r"\bL40\b", "L40"), ("A10G", "A10G"),
               (r"\bA10\b", "A10"), (r"\bL4\b", "L4"),
               ("T4", "T4"), ("V100.*32", "V100-32GB"), ("(?i)V100.*PCIe", "V100-PCIe"), ("V100", "V100"),
               ("(?i)P100.*PCIe", "P100-PCIe"), ("P100", "P100"), (r"(?i)titan ?v\b", "TITAN-V"),
               ("(?i)titan ?rtx", "TITAN-RTX"), ("2080 ?Ti", "RTX-2080Ti"), ("2060", "RTX-2060"),
               ("P4000", "Quadro-P4000"), ("3060", "RTX-3060"),
               ("MI210", "MI210"), ("MI250", "MI250X"), ("MI300X", "MI300X"))
# Node figures (NVLink per GPU and direction, network per node) where a run names only the link
# family ("NVLink", "NVSwitch") or no network: the DGX entries of presets/instances.yaml, and for
# Blackwell NVIDIA's DGX B200 / GB200 NVL72 / GB300 NVL72 datasheets counted the same way (NVLink 5:
# 1.8 TB/s per GPU both ways; one 400 Gb/s NIC per GPU, 800 Gb/s on GB300).
_DGX_INSTANCE = {"A100-40GB": "dgx-a100", "A100-80GB": "dgx-a100", "H100": "dgx-h100", "H200": "dgx-h100",
                 "H20": "dgx-h100",     # (HGX H20 boards carry the H100's NVLink 4 and NVSwitch fabric)
                 "GH200": "quad-gh200", "H100-96GB-500W": "grand-teton-h100"}
_BLACKWELL_NODES = {"B200": ("900 GB/s", "3200 Gbps"), "GB200": ("900 GB/s", "1600 Gbps"),
                    "GB300": ("900 GB/s", "3200 Gbps")}
_NVL72 = 72   # GPUs in one GB200/GB300 NVLink domain
_NVL_GPUS = ("GB200", "GB300")


def _node_figures(gpu: str) -> tuple[str, str] | None:
    if gpu in _DGX_INSTANCE:
        entry = instance_catalog()[_DGX_INSTANCE[gpu]]
        return str(entry["intra_node_bandwidth"]), str(entry["inter_node_bandwidth"])
    return _BLACKWELL_NODES.get(gpu)


def _catalog_gpu(label: str) -> str:
    for pattern, name in _GPU_LABELS:
        if re.search(pattern, label):
            return name
    raise SpecError("cluster.gpu", label, "GPU not in catalog")


def _cluster_spec(cluster: dict, notes: list[str]) -> dict:
    """One node group, or one per entry of a heterogeneous run's `gpu_mix`, in the order given
    (ranks fill them in that order)."""
    num_gpus = parse_int(cluster.get("num_gpus"), "cluster.num_gpus", maximum=MAX_GPUS)
    mix = _gpu_mix(cluster.get("gpu_mix"))
    if not mix:
        mix = [{"gpu": cluster.get("gpu"), "num_gpus": num_gpus}]
    elif sum(entry["num_gpus"] for entry in mix) != num_gpus:
        raise SpecError("cluster.gpu_mix", cluster.get("gpu_mix"), f"does not add up to num_gpus ({num_gpus})")
    nodes = []
    for entry in mix:
        label = str(entry.get("gpu") or "")
        name = _catalog_gpu(label)
        catalog = gpu_catalog()[name]
        gpu: str | dict = name
        memory_gb = entry.get("gpu_mem_gb", cluster.get("gpu_mem_gb") if len(mix) == 1 else None)
        if memory_gb and abs(memory_gb * 1e9 / catalog.memory_bytes - 1) > 0.03 \
                and abs(memory_gb * _GIB / catalog.memory_bytes - 1) > 0.03:
            gpu = {"base": name, "name": f"{name} {memory_gb} GB", "memory": f"{memory_gb} GB"}
            notes.append(f"GPU {label!r}: {name}'s figures with {memory_gb} GB")
        count = entry["num_gpus"]
        per_node = min(parse_int(entry.get("gpus_per_node") or cluster.get("gpus_per_node") or count,
                                 "cluster.gpus_per_node"), count)
        if count % per_node:
            raise SpecError("cluster.gpus_per_node", per_node, f"does not divide the {count} {label} GPUs")
        intra = _intra_bandwidth(str(entry.get("intra_node") or cluster.get("intra_node") or ""), name, label)
        inter = _inter_bandwidth(entry.get("inter_node", cluster.get("inter_node")), name, per_node, num_gpus, notes)
        if name in _NVL_GPUS and count > per_node:
            per_node, inter = _nvlink_domain(count, per_node, inter, notes)
        nodes.append({"count": count // per_node, "gpu": gpu, "gpus_per_node": per_node,
                      "intra_node_bandwidth": intra, "inter_node_bandwidth": inter})
    return {"name": str(cluster.get("name") or "cluster"), "nodes": nodes}


def _gpu_mix(mix) -> list[dict]:
    """A heterogeneous cluster's parts as [{gpu, num_gpus, ...}]: from a list of mappings (gpu with
    count / num_gpus and optional gpus_per_node, intra_node, inter_node, gpu_mem_gb; or an
    instance with its count of nodes), a mapping of GPU (or instance) to count, or text such as
    '16x A100-40GB + 16x RTX 3090' or '2 x p4d.24xlarge + 4 x g5.12xlarge'. A part named by its
    instance takes the catalog's GPU, GPUs per node and links, and counts nodes."""
    if not mix:
        return []
    if isinstance(mix, dict):
        mix = [{"gpu": gpu, "count": count} for gpu, count in mix.items()]
    elif isinstance(mix, str):
        parts = re.findall(r"(\d+)\s*(?:x|\u00d7)?\s*([^+,;]+)", mix)
        if not parts:
            raise SpecError("cluster.gpu_mix", mix, "expected e.g. '16x A100 + 16x RTX 3090'")
        mix = [{"gpu": label.strip(), "count": int(count)} for count, label in parts]
    if not isinstance(mix, list):
        raise SpecError("cluster.gpu_mix", mix, "expected a list, a mapping or text")
    catalog = instance_catalog()
    out = []
    for entry in mix:
        if not isinstance(entry, dict) or not ("gpu" in entry or "instance" in entry):
            raise SpecError("cluster.gpu_mix", entry, "each part needs a gpu or an instance")
        instance = entry.get("instance") or (entry["gpu"] if str(entry["gpu"]).removeprefix("AWS ") in catalog else None)
        if instance is not None:
            name = str(instance).removeprefix("AWS ")
            if name not in catalog:
                raise SpecError("cluster.gpu_mix", instance, "instance not in catalog")
            node = catalog[name]
            nodes = entry.get("nodes", entry.get("count"))
            if not isinstance(nodes, int) or nodes < 1:
                raise SpecError("cluster.gpu_mix", entry, "each instance needs a whole number of nodes (count)")
            entry = {"intra_node": str(node["intra_node_bandwidth"]), "inter_node": str(node["inter_node_bandwidth"]),
                     **entry, "gpu": node["gpu"], "gpus_per_node": node["gpus_per_node"],
                     "num_gpus": nodes * node["gpus_per_node"]}
        count = entry.get("num_gpus", entry.get("count"))
        if not isinstance(count, int) or count < 1:
            raise SpecError("cluster.gpu_mix", entry, "each part needs a whole number of GPUs (num_gpus)")
        out.append({**entry, "num_gpus": count})
    return out


_PCIE_GBPS = {"3": 128, "4": 256, "5": 512}   # x16, one direction


# The A800 and H800, the A100's and H100's export versions, keep their compute but cut NVLink to
# 400 GB/s both ways (200 per direction): the replay reads them as their catalog parents but with this.
_EXPORT_NVLINK = (re.compile(r"\b[AH]800\b"), "200 GB/s")


def _intra_bandwidth(label: str, gpu: str, gpu_label: str = "") -> str:
    figures = _node_figures(gpu)
    if re.search(r"nvlink|nvswitch", label, re.I) and figures:
        return _EXPORT_NVLINK[1] if _EXPORT_NVLINK[0].search(gpu_label) else figures[0]
    match = re.search(r"(\d+(?:\.\d+)?)\s*Gb(?:ps|/s)", label)
    if match:
        return f"{match.group(1)} Gbps"
    match = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", label)
    if match:
        return f"{match.group(1)} GB/s"
    match = re.search(r"pcie\s*(?:gen\s*)?([345])?", label, re.I)
    if match:
        return f"{_PCIE_GBPS[match.group(1) or '4']} Gbps"
    raise SpecError("cluster.intra_node", label, "link not recognised")


def _nvlink_domain(count: int, per_tray: int, tray_network: str, notes: list[str]) -> tuple[int, str]:
    """GB200 and GB300 trays of `per_tray` GPUs sit in racks whose NVLink switches join up to 72
    GPUs: within a rack every GPU reaches every other at its NVLink rate, so a rack is one node
    (as the gb200-nvl72 instance models it) whose network is its trays' NICs together. Racks hold
    the most whole trays up to 72 that divide the GPUs evenly."""
    domain = max((d for d in range(per_tray, _NVL72 + 1, per_tray) if count % d == 0), default=per_tray)
    trays = domain // per_tray
    if trays == 1:                  # trays of 72 or more: each is a domain already
        return per_tray, tray_network
    notes.append(f"NVLink domains of {domain} GPUs ({trays} trays of {per_tray}), one node each")
    return domain, f"{trays * parse_bandwidth(tray_network, 'inter_node') * 8 / 1e9:g} Gbps"


def _inter_bandwidth(label, gpu: str, per_node: int, num_gpus: int, notes: list[str]) -> str:
    text = str(label or "")
    if match := re.search(r"(\d+)\s*x\s*(\d+)\s*Gb/?s", text):                 # "8x 400 Gb/s"
        return f"{int(match.group(1)) * int(match.group(2))} Gbps"
    if match := re.search(r"(\d+)\s*Gb/?s per GPU", text):
        return f"{int(match.group(1)) * per_node} Gbps"
    if match := re.search(r"(\d+(?:\.\d+)?)\s*Gb(?:ps|/s)", text):
        return f"{match.group(1)} Gbps"
    figures = _node_figures(gpu)
    if text or not figures:
        raise SpecError("cluster.inter_node", text or None, "link not recognised")
    if num_gpus > per_node:
        notes.append(f"network not stated: {figures[1]} per node assumed")
    return figures[1]
