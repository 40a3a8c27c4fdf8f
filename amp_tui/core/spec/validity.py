"""Whether a strategy can run on a scenario: degrees against the GPUs it uses, the model's heads,
layers and experts, the batch, and each technique's own conditions. One SpecError naming the field.
"""

from __future__ import annotations

from dataclasses import replace

from amp_tui.core.base.errors import SpecError
from amp_tui.core.spec.knobs import resolve
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy


def validate_strategy(scenario: Scenario, strategy: Strategy, field: str = "strategy") -> None:
    """Raise SpecError (field, value, what is allowed) unless the strategy can run on the scenario."""
    gpus = used_gpus(scenario, strategy, field)
    if strategy.per_stage or strategy.batch_shares:
        validate_uneven(scenario, strategy, gpus, field)
    layers = scenario.model.num_layers
    gbs = scenario.training.global_batch_size
    tp, pp, dp, mbs = strategy.tp, strategy.pp, strategy.dp, strategy.micro_batch_size
    knobs = resolve(strategy, scenario.training)
    cp, v = knobs.cp, knobs.virtual_stages
    if strategy.per_stage:
        pass          # GPU count, heads and micro-batches per stage: checked by validate_uneven
    elif cp > 1 and tp * cp * pp * dp != gpus:
        raise SpecError(f"{field}.tp*cp*pp*dp", f"{tp}*{cp}*{pp}*{dp}={tp * cp * pp * dp}",
                        f"must equal the GPU count it uses ({gpus})")
    elif tp * cp * pp * dp != gpus:
        raise SpecError(f"{field}.tp*pp*dp", f"{tp}*{pp}*{dp}={tp * pp * dp}",
                        f"must equal the GPU count it uses ({gpus}"
                        f"{' of ' + str(scenario.cluster.num_gpus) + ', the rest idle' if strategy.idle else ''})")
    if cp > 1 and scenario.model.sequence_length % (2 * cp):
        raise SpecError(f"{field}.cp", cp, f"2 x cp must divide the sequence length "
                                           f"({scenario.model.sequence_length}) for ring attention's load balance")
    if v > 1 and pp == 1:
        raise SpecError(f"{field}.virtual_stages", v, "interleaving needs a pipeline (pp > 1)")
    if pp * v > layers >= pp:
        raise SpecError(f"{field}.virtual_stages", v, f"pp x virtual_stages ({pp * v}) exceeds the layers ({layers})")
    if pp > layers:
        raise SpecError(f"{field}.pp", pp, f"cannot exceed the number of layers ({layers})")
    if gbs % (dp * mbs) and not strategy.batch_shares:
        raise SpecError(f"{field}.micro_batch_size", mbs,
                        f"dp*micro_batch_size ({dp * mbs}) must divide global_batch_size ({gbs})")
    heads = scenario.model.shape.get("num_heads")
    if heads and heads % tp:
        raise SpecError(f"{field}.tp", tp, f"must divide the model's num_heads ({heads})")
    if knobs.ep > 1:
        _validate_ep(scenario, replace(strategy, ep=knobs.ep), field)
    if knobs.hsdp_shard:
        _validate_hsdp(knobs.hsdp_shard, knobs.zero_stage, dp, field)
    if strategy.partition is not None:
        if len(strategy.partition) != pp:
            chunks = (f", or {pp * knobs.virtual_stages} chunks (pp x virtual_stages) when the strategy states "
                      "virtual_stages") if knobs.virtual_stages > 1 else ""
            raise SpecError(f"{field}.partition", list(strategy.partition), f"needs {pp} entries, one per stage{chunks}")
        if min(strategy.partition) < 1:
            raise SpecError(f"{field}.partition", list(strategy.partition), "every stage needs at least one layer")
        if sum(strategy.partition) != layers:
            raise SpecError(f"{field}.partition", list(strategy.partition),
                            f"sums to {sum(strategy.partition)}; the model has {layers} layers")
    if strategy.placement is not None:
        groups = len(scenario.cluster.nodes)
        if sorted(strategy.placement) != list(range(groups)):
            raise SpecError(f"{field}.placement", list(strategy.placement),
                            f"must list each node-group index 0..{groups - 1} once")


def _validate_ep(scenario: Scenario, strategy: Strategy, field: str) -> None:
    ep, cp = strategy.ep, strategy.cp or 1
    experts = sorted({int(layer.experts) for layer in scenario.model.groups if layer.experts})
    if not experts:
        raise SpecError(f"{field}.ep", ep, "expert parallelism needs a mixture-of-experts model (num_experts)")
    if (strategy.dp * cp) % ep:
        raise SpecError(f"{field}.ep", ep, f"must divide dp*cp ({strategy.dp}*{cp}={strategy.dp * cp})")
    for count in experts:
        if count % ep:
            raise SpecError(f"{field}.ep", ep, f"must divide the number of experts per layer ({count})")


def _validate_hsdp(shard: int, zero_stage: int, dp: int, field: str) -> None:
    if zero_stage != 3:
        raise SpecError(f"{field}.hsdp_shard", shard, f"hybrid sharding needs zero_stage 3 (FSDP), not {zero_stage}")
    if dp % shard or shard >= dp:
        raise SpecError(f"{field}.hsdp_shard", shard, f"must divide dp ({dp}) and be smaller "
                                                      "(equal to dp is plain FSDP: leave hsdp_shard out)")


def used_gpus(scenario: Scenario, strategy: Strategy, field: str = "strategy") -> int:
    """GPUs on the nodes the strategy does not leave idle; SpecError for an impossible `idle`."""
    groups = scenario.cluster.nodes
    idle = dict(strategy.idle or ())
    for group, nodes in idle.items():
        if group >= len(groups):
            raise SpecError(f"{field}.idle", group, f"no such node group; the cluster has 0..{len(groups) - 1}")
        if not 1 <= nodes <= groups[group].count:
            raise SpecError(f"{field}.idle", nodes, f"node group {group} has {groups[group].count} nodes")
    used = sum((g.count - idle.get(i, 0)) * g.gpus_per_node for i, g in enumerate(groups))
    if used == 0:
        raise SpecError(f"{field}.idle", list(idle.items()), "leaves every node idle")
    return used


def validate_uneven(scenario: Scenario, strategy: Strategy, gpus: int, field: str) -> None:
    """Checks for per-stage degrees and batch shares beyond `validate_strategy`'s: one line each."""
    gbs, mbs = scenario.training.global_batch_size, strategy.micro_batch_size
    knobs = resolve(strategy, scenario.training)
    if strategy.batch_shares:
        shares = strategy.batch_shares
        if strategy.per_stage:
            raise SpecError(f"{field}.batch_shares", list(shares), "needs one dp for every stage (not a per-stage dp)")
        if len(shares) != strategy.dp:
            raise SpecError(f"{field}.batch_shares", list(shares), f"needs {strategy.dp} entries, one per "
                                                                   f"data-parallel replica (dp = {strategy.dp})")
        if sum(shares) != gbs:
            raise SpecError(f"{field}.batch_shares", list(shares), f"sums to {sum(shares)}; global_batch_size is {gbs}")
        for i, n in enumerate(shares):
            if n % mbs:
                raise SpecError(f"{field}.batch_shares[{i}]", n, f"must be a multiple of micro_batch_size ({mbs})")
        if knobs.zero_stage >= 3:
            raise SpecError(f"{field}.batch_shares", list(shares), "uneven shares are not modelled with ZeRO-3")
        return
    tps, dps = strategy.tps, strategy.dps
    if knobs.virtual_stages > 1:
        raise SpecError(f"{field}.virtual_stages", knobs.virtual_stages, "per-stage tp/dp needs virtual_stages 1")
    if knobs.ep > 1:
        raise SpecError(f"{field}.ep", knobs.ep, "per-stage tp/dp is not combined with expert parallelism")
    if knobs.hsdp_shard:
        raise SpecError(f"{field}.hsdp_shard", knobs.hsdp_shard, "per-stage tp/dp is not combined with HSDP")
    used = knobs.cp * sum(t * d for t, d in zip(tps, dps))
    if used != gpus:
        raise SpecError(f"{field}.tp*dp", " + ".join(f"{t}*{d}" for t, d in zip(tps, dps)) + f"={used // knobs.cp}",
                        f"the stages' GPUs (x cp {knobs.cp}) must equal the GPU count it uses ({gpus})")
    heads = scenario.model.shape.get("num_heads")
    for s, t in enumerate(tps):
        if heads and heads % t:
            raise SpecError(f"{field}.tp[{s}]", t, f"must divide the model's num_heads ({heads})")
    m = mbs * max(dps)
    for s, d in enumerate(dps):
        if m % d:
            raise SpecError(f"{field}.dp[{s}]", d, f"must divide the pipeline's micro-batch, micro_batch_size x "
                                                   f"max(dp) = {m} samples")
