"""A training strategy: parallel degrees, micro-batch size, partition and placement, validated."""

from __future__ import annotations

from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_WHOLE_NUMBER
from amp_tui.core.base.units import parse_int
from amp_tui.core.spec.chunks import interleaved_chunks, rank_partition
from amp_tui.core.spec.scenario import RECOMPUTE, ZERO_STAGES


@dataclass(frozen=True)
class Strategy:
    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    partition: tuple[int, ...] | None = None   # layers per stage, over the expanded layer list
    placement: tuple[int, ...] | None = None   # node-group indices in the order they take ranks
    # The training techniques of this strategy (see core/spec/knobs.py); None: as the scenario's
    # training section says (a searched strategy always has them filled in).
    recompute: str | None = None               # none | selective | full
    zero_stage: int | None = None              # 0..3; 1 is Megatron's distributed optimizer, 3 is FSDP
    sequence_parallel: bool | None = None      # Megatron SP beside tensor parallelism
    cp: int | None = None                      # context-parallel degree (ring attention)
    virtual_stages: int | None = None          # interleaved 1F1B: model chunks per pipeline rank
    # Expert parallelism: each MoE layer's experts split over ep GPUs of the dp x cp group (as in
    # Megatron), so ep is not a factor of the world size. None or 1: every GPU holds every expert.
    ep: int | None = None
    # HSDP (core/costmodel/terms/sharding.py): under ZeRO-3, parameters, gradients and optimizer state are
    # sharded over groups of this many data-parallel ranks and replicated across the dp / hsdp_shard
    # groups. None: sharded over every data-parallel rank (plain FSDP), as the training section says.
    hsdp_shard: int | None = None
    # Nodes left out: (node-group index, how many of its nodes), ascending by group; None or empty:
    # every node is used. A group's used nodes are its first ones; ranks skip the idle ones.
    idle: tuple[tuple[int, int], ...] | None = None
    # Per-stage degrees (Metis, core/costmodel/stagewise.py): one tp and one dp per stage; None: `tp` and
    # `dp` for every stage. When set, `tp` and `dp` hold the largest entry, and micro_batch_size
    # counts a replica's samples on the stage with the largest dp (the pipeline's micro-batch is
    # micro_batch_size x dp samples, split over each stage's own replicas).
    stage_tp: tuple[int, ...] | None = None
    stage_dp: tuple[int, ...] | None = None
    # Uneven data-parallel shares (HetPipe/Whale/Cephalo, core/costmodel/terms/shares.py): samples per
    # replica per iteration, summing to the global batch; None: an even split.
    batch_shares: tuple[int, ...] | None = None

    def num_micro_batches(self, global_batch_size: int) -> int:
        """Micro-batches per iteration (of the replica with the most, under batch shares)."""
        if self.batch_shares:
            return max(self.batch_shares) // self.micro_batch_size
        return global_batch_size // (self.dp * self.micro_batch_size)

    @property
    def tps(self) -> tuple[int, ...]:
        """Tensor-parallel degree per stage."""
        return self.stage_tp or (self.tp,) * self.pp

    @property
    def dps(self) -> tuple[int, ...]:
        """Data-parallel degree per stage."""
        return self.stage_dp or (self.dp,) * self.pp

    @property
    def per_stage(self) -> bool:
        return self.stage_tp is not None or self.stage_dp is not None

    @property
    def num_gpus(self) -> int:
        return (self.cp or 1) * sum(t * d for t, d in zip(self.tps, self.dps))

    @property
    def label(self) -> str:
        cp = f"c{self.cp}" if self.cp and self.cp > 1 else ""
        tp = "/".join(map(str, self.stage_tp)) if self.stage_tp else str(self.tp)
        dp = "/".join(map(str, self.stage_dp)) if self.stage_dp else str(self.dp)
        return f"{tp}x{self.pp}x{dp}{cp}"

    def to_dict(self) -> dict:
        out: dict = {"tp": list(self.stage_tp) if self.stage_tp else self.tp, "pp": self.pp,
                     "dp": list(self.stage_dp) if self.stage_dp else self.dp, "micro_batch_size": self.micro_batch_size}
        if self.batch_shares:
            out["batch_shares"] = list(self.batch_shares)
        if self.partition is not None:
            out["partition"] = list(self.partition)
            if (self.virtual_stages or 1) > 1:
                out["chunks"] = list(interleaved_chunks(self.partition, self.virtual_stages))
        if self.placement is not None:
            out["placement"] = list(self.placement)
        for key in (*KNOB_FIELDS, "ep", "hsdp_shard"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.idle:
            out["idle"] = [{"group": group, "nodes": nodes} for group, nodes in self.idle]
        return out


KNOB_FIELDS = ("recompute", "zero_stage", "sequence_parallel", "cp", "virtual_stages")


def even_partition(num_layers: int, pp: int) -> tuple[int, ...]:
    """Equal layer counts per stage, the remainder going to the first stages (Megatron/DeepSpeed default)."""
    base, extra = divmod(num_layers, pp)
    return tuple(base + (1 if s < extra else 0) for s in range(pp))


def parse_strategy(value: object, field: str = "strategy") -> Strategy:
    """Read the fields; `validate_strategy` checks them against a scenario."""
    if not isinstance(value, dict):
        raise SpecError(field, value, "expected a mapping with tp, pp, dp, micro_batch_size")
    allowed = {"tp", "pp", "dp", "micro_batch_size", "partition", "placement", "ep", "hsdp_shard", "idle",
               "batch_shares",
               *KNOB_FIELDS}
    for key in value:
        if key not in allowed and key not in _IGNORED_OUTPUT_KEYS:
            raise SpecError(f"{field}.{key}", value[key], f"unknown strategy field; allowed: {', '.join(sorted(allowed))}")
    for key in ("tp", "pp", "dp", "micro_batch_size"):
        if key not in value:
            raise SpecError(f"{field}.{key}", None, "required")
    partition = value.get("partition")
    if partition is not None:
        if not isinstance(partition, list) or not partition:
            raise SpecError(f"{field}.partition", partition, "expected a list of layer counts, one per stage")
        partition = tuple(parse_int(n, f"{field}.partition[{i}]") for i, n in enumerate(partition))
    placement = value.get("placement")
    if placement is not None:
        if not isinstance(placement, list) or not placement:
            raise SpecError(f"{field}.placement", placement, "expected a list of node-group indices")
        placement = tuple(parse_int(n, f"{field}.placement[{i}]", minimum=0) for i, n in enumerate(placement))
    knobs = parse_knobs(value, field)
    idle = parse_idle(value.get("idle"), f"{field}.idle")
    pp = parse_int(value["pp"], f"{field}.pp")
    v = knobs.get("virtual_stages")
    if partition is not None and isinstance(v, int) and v > 1 and len(partition) == pp * v:
        partition = rank_partition(partition, pp)     # pp x v chunks: the layers each rank holds
    stage_tp = per_stage_degrees(value["tp"], pp, f"{field}.tp")
    stage_dp = per_stage_degrees(value["dp"], pp, f"{field}.dp")
    shares = value.get("batch_shares")
    if shares is not None:
        if not isinstance(shares, list) or not shares:
            raise SpecError(f"{field}.batch_shares", shares, "expected a list of samples per data-parallel replica")
        shares = tuple(parse_int(n, f"{field}.batch_shares[{i}]") for i, n in enumerate(shares))
    return Strategy(
        tp=max(stage_tp), pp=pp, dp=max(stage_dp),
        micro_batch_size=parse_int(value["micro_batch_size"], f"{field}.micro_batch_size"),
        partition=partition,
        placement=placement,
        ep=parse_int(value["ep"], f"{field}.ep") if value.get("ep") is not None else None,
        hsdp_shard=(parse_int(value["hsdp_shard"], f"{field}.hsdp_shard")
                    if value.get("hsdp_shard") is not None else None),
        idle=idle,
        stage_tp=varying_degrees(stage_tp),
        stage_dp=varying_degrees(stage_dp),
        batch_shares=shares,
        **knobs,
    )


def varying_degrees(degrees: tuple[int, ...]) -> tuple[int, ...] | None:
    """Per-stage degrees where they differ; None where one degree serves every stage."""
    return degrees if len(set(degrees)) > 1 else None


def per_stage_degrees(value: object, pp: int, field: str, maximum: int = MAX_WHOLE_NUMBER) -> tuple[int, ...]:
    """A degree for every stage given as a list of one per stage, or one number for all: then a
    single entry (never pp copies: pp is not yet checked against the model, and may be huge)."""
    if not isinstance(value, list):
        return (parse_int(value, field, maximum=maximum),)
    if len(value) != pp:
        raise SpecError(field, value, f"needs {pp} entries, one per stage (pp = {pp}), or one number for all")
    return tuple(parse_int(n, f"{field}[{i}]", maximum=maximum) for i, n in enumerate(value))


def parse_idle(value: object, field: str) -> tuple[tuple[int, int], ...] | None:
    """A list of {group, nodes}: nodes of a node group the strategy leaves idle."""
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise SpecError(field, value, "expected a list of {group: INDEX, nodes: COUNT}")
    out = {}
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or set(entry) != {"group", "nodes"}:
            raise SpecError(f"{field}[{i}]", entry, "expected {group: INDEX, nodes: COUNT}")
        group = parse_int(entry["group"], f"{field}[{i}].group", minimum=0)
        if group in out:
            raise SpecError(f"{field}[{i}].group", group, "listed twice")
        out[group] = parse_int(entry["nodes"], f"{field}[{i}].nodes")
    return tuple(sorted(out.items()))


def parse_knobs(value: dict, field: str) -> dict:
    """The optional technique fields of a strategy mapping, checked one by one."""
    out: dict = {}
    if value.get("recompute") is not None:
        if value["recompute"] not in RECOMPUTE:
            raise SpecError(f"{field}.recompute", value["recompute"], f"expected one of {', '.join(RECOMPUTE)}")
        out["recompute"] = value["recompute"]
    if value.get("zero_stage") is not None:
        stage = value["zero_stage"]
        if isinstance(stage, bool) or stage not in ZERO_STAGES:
            raise SpecError(f"{field}.zero_stage", stage, f"expected one of {', '.join(map(str, ZERO_STAGES))}")
        out["zero_stage"] = stage
    if value.get("sequence_parallel") is not None:
        if not isinstance(value["sequence_parallel"], bool):
            raise SpecError(f"{field}.sequence_parallel", value["sequence_parallel"], "expected true or false")
        out["sequence_parallel"] = value["sequence_parallel"]
    for key in ("cp", "virtual_stages"):
        if value.get(key) is not None:
            out[key] = parse_int(value[key], f"{field}.{key}")
    return out


# Fields a plan's strategy entry carries beside the strategy itself (rank, predictions...).
_IGNORED_OUTPUT_KEYS = {"rank", "num_micro_batches", "gpus_used", "chunks"}
