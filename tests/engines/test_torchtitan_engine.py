"""torchtitan's own code on the torchtitan export of every case: its ConfigManager loads
torchtitan_job.py (--module torchtitan_job --config amp_tui_plan) into a Trainer.Config, ParallelDims
checks the degrees at the plan's world size, and its pipeline splitter cuts the model (built on the
meta device) into the chunks module_fqns_per_model_part names."""

from __future__ import annotations

import sys

import pytest

from amp_tui.core.plans.exports.common import stage_bounds
from amp_tui.core.plans.exports.torchtitan import CONFIG_FUNCTION
from tests.engines.conftest import CASES, need

# torchtitan ships no GPT-2 or TransGAN: their files name no base config, and the user points
# TORCHTITAN_BASE_CONFIG at their own model's. Here it is torchtitan's small Llama 3 config, so that
# what the file sets (batch, degrees, schedule, checkpointing) goes through torchtitan's own checks.
STAND_IN = "torchtitan.models.llama3.config_registry:llama3_debugmodel"


def load(folder, monkeypatch, stand_in: bool):
    manager = need("torchtitan.config.manager")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "torchtitan_job", raising=False)
    if stand_in:
        monkeypatch.setenv("TORCHTITAN_BASE_CONFIG", STAND_IN)
    else:
        monkeypatch.delenv("TORCHTITAN_BASE_CONFIG", raising=False)
    return manager.ConfigManager().parse_args(["--module", "torchtitan_job", "--config", CONFIG_FUNCTION])


@pytest.mark.parametrize("name", CASES)
def test_torchtitan_loads_the_job(name, plans, exported, monkeypatch):
    need("torchtitan")
    from torchtitan.distributed.parallel_dims import ParallelDims

    plan = plans(name)
    s, training = plan.strategy, plan.scenario.training
    llama = plan.scenario.model.family == "llama"
    config = load(exported(name, "torchtitan"), monkeypatch, stand_in=not llama)
    world = s.tp * s.pp * s.dp
    dims = ParallelDims.from_config(config.parallelism, world)     # asserts the product is the world size
    assert (dims.tp, dims.pp, dims.dp_replicate * dims.dp_shard) == (s.tp, s.pp, s.dp)
    # trainer.py: global = local x data-parallel degree x accumulation steps; with pp, local in micro-batches
    local, dp = config.training.local_batch_size, dims.dp_replicate * dims.dp_shard
    assert config.training.global_batch_size == training.global_batch_size
    assert training.global_batch_size % (local * dp) == 0
    if s.pp > 1:
        assert local // config.parallelism.pipeline_parallel_microbatch_size == plan.strategy.num_micro_batches(
            training.global_batch_size)
    if not llama:
        return
    assert (config.model_spec.name, config.model_spec.flavor) == ("llama3", "8B")
    assert config.training.seq_len == plan.scenario.model.sequence_length
    torch = need("torch")
    from torchtitan.distributed.pipeline_parallel import _split_module

    with torch.device("meta"):
        model = config.model_spec.model.build()
    bounds = stage_bounds(plan)
    chunks = config.parallelism.module_fqns_per_model_part
    assert len(chunks) == s.pp
    for stage, names in enumerate(chunks):
        part = _split_module(model, names)
        layers = len(part.layers) + (part.tok_embeddings is not None) + (part.lm_head is not None)
        assert layers == bounds[stage + 1] - bounds[stage], (stage, names)
        assert (part.tok_embeddings is not None, part.lm_head is not None) == (stage == 0, stage == s.pp - 1)
