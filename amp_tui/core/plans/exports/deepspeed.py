"""DeepSpeed settings for a plan: ds_config.json, the pipeline stage boundaries, and a hostfile.

Checked against DeepSpeed 0.19.8:
- `DeepSpeedConfig` asserts train_batch_size == train_micro_batch_size_per_gpu x
  gradient_accumulation_steps x data-parallel size, where the data-parallel size is the world size
  over tp x pp when a model-parallel unit (mpu) is passed (Megatron-DeepSpeed does).
- `PipelineModule` takes partition_method 'uniform', 'parameters' or 'type:REGEX' only; it stores the
  boundaries as `self.parts` = [0, b1, ..., L] and builds layers parts[stage] .. parts[stage + 1] - 1.
  A plan's uneven split is applied by overriding `_partition_layers` (planned_pipeline.py).
- The pipeline engine refuses ZeRO stages 2 and 3.
- ZeRO-3 keys (runtime/zero/config.py): overlap_comm, contiguous_gradients, reduce_bucket_size and the
  stage3_* aliases prefetch_bucket_size, param_persistence_threshold, max_live_parameters,
  max_reuse_distance, gather_16bit_weights_on_model_save. The sizes follow the rule Hugging Face's
  DeepSpeed integration uses for "auto": hidden^2, 0.9 hidden^2 and 10 hidden elements.
- There is no context parallelism (ring attention), so a plan with cp > 1 is refused.
- There is no hybrid sharding either: config.py rejects MiCS's mics_shard_size ("MiCS ZeRO-3 sharding
  has been removed"), and ZeRO++'s zero_hpz_partition_size keeps a secondary copy of the weights
  per group while gradients and optimizer state stay sharded over every rank. An HSDP plan is refused.
- The launcher reads `hostname slots=N` lines (and `#` comment lines) and hands out ranks host by host
  in file order, slot by slot.
"""

from __future__ import annotations

import json

from amp_tui.core.base.errors import SpecError
from amp_tui.core.plans.exports.common import (
    Export,
    nodes,
    num_micro_batches,
    python_string_text,
    stage_bounds,
    summary,
)
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.spec.knobs import Knobs, resolve

_MODULE_TEMPLATE = '''"""DeepSpeed PipelineModule with the stage boundaries of an amp-tui plan.

{summary}

DeepSpeed's PipelineModule splits layers 'uniform'-ly, by 'parameters' or by 'type:REGEX'; it has no
way to take given boundaries. This subclass sets them: stage s builds layers parts[s] .. parts[s+1]-1
of the layer list you pass, which must be the plan's {num_layers} layers in the plan's order.
Written for DeepSpeed 0.19 (PipelineModule._partition_layers and _set_bounds).

    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
    topology = PipeModelDataParallelTopology(num_pp={pp}, num_mp={tp}, num_dp={dp})
    model = PlannedPipelineModule(layers, topology=topology, loss_fn=loss_fn,
                                  activation_checkpoint_interval={checkpoint_interval})
"""

import json

from deepspeed.pipe import PipelineModule

PARTS = {parts}


class PlannedPipelineModule(PipelineModule):
    def __init__(self, layers, *args, parts=None, partition_file=None, **kwargs):
        if parts is None and partition_file is not None:
            with open(partition_file) as handle:
                parts = json.load(handle)["parts"]
        self._planned_parts = [int(p) for p in (PARTS if parts is None else parts)]
        super().__init__(layers, *args, **kwargs)

    def _partition_layers(self, method="uniform"):
        parts = self._planned_parts
        if len(parts) != self.num_stages + 1 or parts[0] != 0 or parts[-1] != len(self._layer_specs):
            raise ValueError(f"planned parts {{parts}} do not fit {{self.num_stages}} stages over "
                             f"{{len(self._layer_specs)}} layers")
        self.parts = list(parts)
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
'''


def ds_config(plan: Plan) -> dict:
    """The DeepSpeed configuration mapping (ds_config.json)."""
    s, training = plan.strategy, plan.scenario.training
    knobs = resolve(s, training)
    config: dict = {
        "train_batch_size": training.global_batch_size,
        "train_micro_batch_size_per_gpu": s.micro_batch_size,
        "gradient_accumulation_steps": num_micro_batches(plan),
    }
    if training.precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0}
    elif training.precision in ("bf16", "fp8", "fp4"):
        config["bf16"] = {"enabled": True}
    stage = deepspeed_zero_stage(plan)
    config["zero_optimization"] = {"stage": stage}
    if stage == 3:
        config["zero_optimization"].update(_zero3_settings(plan.scenario.model.shape.get("hidden_size")))
    if s.pp > 1:
        config["pipeline"] = {"activation_checkpoint_interval": 1 if knobs.recompute == "full" else 0}
    return config


def deepspeed_zero_stage(plan: Plan) -> int:
    """The plan's ZeRO stage, or 1 where DeepSpeed's pipeline engine refuses stages 2 and 3."""
    stage = resolve(plan.strategy, plan.scenario.training).zero_stage
    return stage if plan.strategy.pp == 1 else min(stage, 1)


def _zero3_settings(hidden: int | None) -> dict:
    settings: dict = {"overlap_comm": True, "contiguous_gradients": True,
                      "stage3_max_live_parameters": 1_000_000_000, "stage3_max_reuse_distance": 1_000_000_000,
                      "stage3_gather_16bit_weights_on_model_save": True}
    if hidden:   # without a hidden size DeepSpeed's own defaults stand
        settings.update(reduce_bucket_size=hidden * hidden, stage3_prefetch_bucket_size=int(0.9 * hidden * hidden),
                        stage3_param_persistence_threshold=10 * hidden)
    return settings


def pipeline_partition(plan: Plan) -> dict:
    """Stage boundaries as PipelineModule stores them, with the layers each stage holds."""
    s = plan.strategy
    bounds = stage_bounds(plan)
    layers = plan.scenario.model.layers
    return {
        "num_stages": s.pp,
        "num_layers": len(layers),
        "parts": bounds,
        "topology": {"num_pp": s.pp, "num_mp": s.tp, "num_dp": s.dp},
        "activation_checkpoint_interval": 1 if resolve(s, plan.scenario.training).recompute == "full" else 0,
        "stages": [{"stage": k, "first_layer": a, "last_layer": b - 1,
                    "layers": _runs([layer.name for layer in layers[a:b]])}
                   for k, (a, b) in enumerate(zip(bounds, bounds[1:]))],
    }


def _runs(names: list[str]) -> str:
    """["embedding", "block", "block"] -> "embedding, block x2"."""
    out: list[list] = []
    for name in names:
        if out and out[-1][0] == name:
            out[-1][1] += 1
        else:
            out.append([name, 1])
    return ", ".join(name if count == 1 else f"{name} x{count}" for name, count in out)


def hostfile(plan: Plan) -> str:
    lines = [f"# {summary(plan)}",
             "# DeepSpeed hostfile in the plan's node order: the launcher hands out ranks host by host in",
             "# this order, so replace each node-k with a host of the kind its comment names, keeping the order."]
    for slot in nodes(plan):
        lines.append(f"# {slot.describe()}")
        lines.append(f"{slot.hostname} slots={slot.gpus}")
    return "\n".join(lines) + "\n"


def export(plan: Plan) -> Export:
    s, training = plan.strategy, plan.scenario.training
    knobs = resolve(s, training)
    if knobs.cp > 1:
        raise SpecError("strategy.cp", knobs.cp, "DeepSpeed has no context parallelism (ring attention); "
                        "export this plan with --format megatron or --format torchtitan")
    if knobs.zero_stage == 3 and knobs.hsdp_shard:
        raise SpecError("strategy.hsdp_shard", knobs.hsdp_shard,
                        "DeepSpeed has no hybrid sharding (MiCS is removed; ZeRO++ hpZ shards only a secondary weight "
                        "copy); export this plan with --format torchtitan or --format megatron")
    partition = pipeline_partition(plan)
    files = {
        "ds_config.json": json.dumps(ds_config(plan), indent=2) + "\n",
        "pipeline_partition.json": json.dumps(partition, indent=2) + "\n",
        "hostfile": hostfile(plan),
    }
    world = plan.scenario.cluster.num_gpus
    notes = [
        f"ds_config.json: train_batch_size {training.global_batch_size} = micro-batch {s.micro_batch_size} x "
        f"{num_micro_batches(plan)} accumulation steps x data-parallel size {s.dp} "
        f"(world {world} / (tp {s.tp} x pp {s.pp})). Add your optimizer and scheduler "
        f"(the plan assumed {training.optimizer}).",
        "hostfile: node-0, node-1, ... are placeholders; replace each with a host of the kind named in its "
        "comment and keep the order, then run `deepspeed --hostfile hostfile train.py --deepspeed_config "
        "ds_config.json`.",
    ]
    if training.precision == "tf32":
        notes.append("tf32: fp32 training with TF32 matrix multiplies, which ds_config.json cannot switch on: "
                     "set torch.backends.cuda.matmul.allow_tf32 = True (NGC's containers do).")
    if s.tp > 1:
        notes.append(f"tp = {s.tp}: DeepSpeed has no tensor parallelism of its own for this; use Megatron-DeepSpeed "
                     "(or pass your model-parallel unit as mpu= to deepspeed.initialize) so that DeepSpeed sees the "
                     f"data-parallel size {s.dp}, not the world size.")
    if s.pp > 1:
        files["planned_pipeline.py"] = _MODULE_TEMPLATE.format(
            summary=python_string_text(summary(plan)), num_layers=partition["num_layers"], pp=s.pp, tp=s.tp, dp=s.dp,
            checkpoint_interval=partition["activation_checkpoint_interval"], parts=partition["parts"])
        notes.append(
            f"pipeline_partition.json: parts {partition['parts']} are the stage boundaries over the plan's "
            f"{partition['num_layers']} layers. PipelineModule's partition_method cannot take them ('uniform', "
            "'parameters' and 'type:REGEX' only); planned_pipeline.py subclasses it and sets self.parts in "
            "_partition_layers. Your layer list must match the plan's, layer for layer.")
        notes.append(f"Use PipeModelDataParallelTopology(num_pp={s.pp}, num_mp={s.tp}, num_dp={s.dp}): its rank "
                     "order (tensor, then data, then pipeline) is the one the plan was predicted with.")
        if knobs.zero_stage >= 2:
            notes.append("DeepSpeed's pipeline engine supports ZeRO stages 0 and 1 only: ds_config.json asks for "
                         f"stage 1, so memory is higher than the plan's ZeRO-{knobs.zero_stage} prediction.")
        if knobs.virtual_stages > 1:
            notes.append(f"DeepSpeed's pipeline engine has no interleaved schedule: it runs plain 1F1B, one chunk per "
                         f"rank, with a bubble about {knobs.virtual_stages} times the plan's.")
        if training.schedule == "gpipe":
            notes.append("DeepSpeed's pipeline engine runs 1F1B, not GPipe: about the same time, less activation "
                         "memory than predicted.")
    else:
        notes.append("pp = 1: no pipeline, so no PipelineModule is needed; pipeline_partition.json lists the single "
                     "stage for reference.")
        if knobs.zero_stage == 3:
            notes.append("ZeRO-3 (DeepSpeed's FSDP): parameters, gradients and optimizer state sharded over the "
                         f"{s.dp} data-parallel ranks; bucket and prefetch sizes follow the hidden size.")
        if knobs.recompute == "full":
            notes.append("Full recomputation: wrap each layer in deepspeed.checkpointing.checkpoint (or "
                         "torch.utils.checkpoint) in your model; a config entry alone does not turn it on.")
    notes += _technique_notes(plan, knobs)
    return Export(files=files, notes=notes)


def _technique_notes(plan: Plan, knobs: Knobs) -> list[str]:
    """What DeepSpeed's config cannot switch on by itself but the model code can."""
    s, training = plan.strategy, plan.scenario.training
    notes = []
    if knobs.recompute == "selective":
        notes.append("Selective recomputation (attention only) is the model's to do: wrap the attention core in "
                     "deepspeed.checkpointing.checkpoint; ds_config.json has no switch for it.")
    if knobs.sequence_parallel and s.tp > 1:
        notes.append("Sequence parallelism belongs to the tensor-parallel model code (Megatron-DeepSpeed's "
                     "--sequence-parallel), not to ds_config.json.")
    if training.precision in ("fp8", "fp4"):
        recipe = "" if training.precision == "fp8" else " with the NVFP4BlockScaling recipe"
        notes.append(f"{training.precision}: DeepSpeed has no {training.precision} switch; the config trains in bf16, "
                     f"and the model's linear layers must be Transformer Engine's (te.Linear under "
                     f"te.fp8_autocast{recipe}) for {training.precision} matrix multiplies.")
    if knobs.ep > 1:
        notes.append(f"Expert parallelism is set in the model: deepspeed.moe.layer.MoE(..., ep_size={knobs.ep}, "
                     f"k={plan.scenario.model.shape.get('top_k', 'top_k')}) for each MoE layer.")
    return notes
