"""Engine details: the techniques' flags and keys through Megatron-Core's config classes, DeepSpeed's
ZeRO config, torch's launcher parser, and DeepSpeed's pipeline module on two CPU ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace

import pytest

from amp_tui.core.plans.exports import export_plan
from amp_tui.core.plans.exports.megatron import blocks_per_stage, layout_string
from amp_tui.core.costmodel.placement import build_layout
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy
from tests.engines.conftest import need
from tests.test_exports import (  # noqa: F401  (plans: the module fixture, preset -> its best plan)
    B200_SCENARIO,
    SCENARIOS,
    knob_plan,
    megatron_args,
    megatron_refuses,
    option,
    plans,
    plan_for,
    torchrun_lines,
)


def test_megatron_core_takes_the_hsdp_instances():
    """Megatron-Core's DDP config has the field the flag sets."""
    ddp = need("megatron.core.distributed.distributed_data_parallel_config")
    plan = knob_plan(Strategy(1, 1, 32, 1, zero_stage=3, hsdp_shard=8))
    args = megatron_args(export_plan(plan, "megatron").files["megatron_args.sh"])
    config = ddp.DistributedDataParallelConfig(
        use_distributed_optimizer=True, use_megatron_fsdp=True,
        data_parallel_sharding_strategy=args["--data-parallel-sharding-strategy"][0],
        num_distributed_optimizer_instances=int(args["--num-distributed-optimizer-instances"][0]))
    assert config.num_distributed_optimizer_instances == 4 and config.outer_dp_sharding_strategy == "no_shard"



def test_torch_launcher_reads_the_lines(plans):
    """torch.distributed.run parses each line into the node rank and process count the plan needs."""
    run = need("torch.distributed.run")
    plan = plans("mixed-a100-a10g-llama2-13b")   # 2 nodes of 8 GPUs, 4 of 4
    layout = build_layout(plan.scenario.cluster, plan.strategy.tp, plan.strategy.pp, plan.strategy.dp,
                          plan.strategy.placement)
    for words in torchrun_lines(export_plan(plan, "torchrun").files["launch.sh"]):
        words = [w.replace("$MASTER_ADDR:$MASTER_PORT", "127.0.0.1:29500").replace("$TRAIN_SCRIPT", "train.py")
                 for w in words[1:] if w != "$@"]
        config, _, _ = run.config_from_args(run.get_args_parser().parse_args(words))
        rank = int(option(words, "--node-rank"))
        assert config.min_nodes == config.max_nodes == plan.scenario.cluster.num_nodes
        assert config.rdzv_backend == "static" and config.rdzv_configs["rank"] == rank
        assert config.nproc_per_node == plan.scenario.cluster.nodes[layout.node_group[rank]].gpus_per_node


def test_megatron_core_accepts_the_split(plans):
    """Megatron-Core's TransformerConfig checks the first/last split; its layout parser the exact one."""
    config_module = need("megatron.core.transformer.transformer_config")
    layout_module = need("megatron.core.transformer.pipeline_parallel_layer_layout")
    torch = need("torch")
    scenario = load_scenario("paper-het-cluster")
    cases = [plans(name) for name in SCENARIOS if not megatron_refuses(plans(name))]
    cases += [plan_for(scenario, Strategy(1, 4, 4, 1, p, (0, 1))) for p in [(9, 7, 7, 7), (1, 9, 10, 10), (3, 9, 9, 9)]]
    for plan in cases:
        args = megatron_args(export_plan(plan, "megatron").files["megatron_args.sh"])
        if "--num-layers" not in args:
            continue
        get = lambda flag: int(args[flag][0]) if flag in args else None  # noqa: E731
        config = config_module.TransformerConfig(
            num_layers=get("--num-layers"), hidden_size=get("--hidden-size"),
            num_attention_heads=get("--num-attention-heads"), num_query_groups=get("--num-query-groups"),
            ffn_hidden_size=get("--ffn-hidden-size"),
            tensor_model_parallel_size=plan.strategy.tp, pipeline_model_parallel_size=plan.strategy.pp,
            num_layers_in_first_pipeline_stage=get("--decoder-first-pipeline-num-layers"),
            num_layers_in_last_pipeline_stage=get("--decoder-last-pipeline-num-layers"),
            recompute_granularity=args.get("--recompute-granularity", [None])[0],
            recompute_method=args.get("--recompute-method", [None])[0],
            recompute_num_layers=get("--recompute-num-layers"),
            add_bias_linear="--disable-bias-linear" not in args,
            bf16="--bf16" in args, fp16="--fp16" in args,
            pipeline_dtype=torch.bfloat16 if "--bf16" in args else torch.float16 if "--fp16" in args else torch.float32)
        assert config.num_layers == sum(blocks_per_stage(plan.scenario.model, plan.strategy.partition))
        planned = blocks_per_stage(plan.scenario.model, plan.strategy.partition)
        layout = layout_module.PipelineParallelLayerLayout(layout_string(planned), plan.strategy.pp)
        layout.validate_layer_layout(num_layers=config.num_layers, mtp_num_layers=None)
        assert [row[0].count(layout_module.LayerType.decoder) for row in layout.layout] == list(planned)


def test_deepspeed_runs_the_planned_pipeline(tmp_path):
    """launch.sh starts torchrun, and planned_pipeline.py makes DeepSpeed build each stage's layers."""
    need("deepspeed")
    scenario = parse_scenario({
        "name": "two-gpus",
        "cluster": {"nodes": [{"count": 1, "gpu": "T4", "gpus_per_node": 2, "intra_node_bandwidth": "50 Gbps",
                               "inter_node_bandwidth": "50 Gbps"}]},
        "model": "gpt2-medium", "training": {"global_batch_size": 8}})
    plan = plan_for(scenario, Strategy(1, 2, 1, 1, (7, 23), (0,)))
    for fmt in ("deepspeed", "torchrun"):
        for file_name, text in export_plan(plan, fmt).files.items():
            (tmp_path / file_name).write_text(text)
    (tmp_path / "worker.py").write_text("""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, deepspeed, deepspeed.ops
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False   # see deepspeed_check.py
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
from planned_pipeline import PlannedPipelineModule
topology = PipeModelDataParallelTopology(num_pp=2, num_mp=1, num_dp=1)
model = PlannedPipelineModule([torch.nn.Identity() for _ in range(30)], topology=topology)
rank = int(os.environ["RANK"])
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"stage-{rank}.json"), "w") as out:
    json.dump([rank, model._local_start, model._local_stop], out)
""")
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
               NODE_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               TRAIN_SCRIPT=str(tmp_path / "worker.py"))
    result = subprocess.run(["bash", str(tmp_path / "launch.sh")], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    stages = sorted(json.loads(path.read_text()) for path in tmp_path.glob("stage-*.json"))
    assert stages == [[0, 0, 7], [1, 7, 30]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_megatron_core_accepts_todays_techniques():
    """TransformerConfig takes the interleaved, sequence-parallel, selective and MoE settings the flags say."""
    config_module = need("megatron.core.transformer.transformer_config")
    torch = need("torch")
    plan = knob_plan(Strategy(4, 2, 4, 1, (17, 17), recompute="selective", sequence_parallel=True, virtual_stages=2))
    args = megatron_args(export_plan(plan, "megatron").files["megatron_args.sh"])
    config = config_module.TransformerConfig(
        num_layers=int(args["--num-layers"][0]), hidden_size=int(args["--hidden-size"][0]),
        num_attention_heads=int(args["--num-attention-heads"][0]), num_query_groups=int(args["--num-query-groups"][0]),
        ffn_hidden_size=int(args["--ffn-hidden-size"][0]), tensor_model_parallel_size=4, pipeline_model_parallel_size=2,
        virtual_pipeline_model_parallel_size=int(args["--num-virtual-stages-per-pipeline-rank"][0]),
        sequence_parallel="--sequence-parallel" in args, recompute_granularity=args["--recompute-granularity"][0],
        bf16=True, pipeline_dtype=torch.bfloat16)
    assert config.virtual_pipeline_model_parallel_size == 2 and config.recompute_granularity == "selective"
    scenario = parse_scenario({**B200_SCENARIO, "model": {"preset": "mixtral-8x7b"}})
    prediction = evaluate(scenario, Strategy(2, 1, 16, 1))
    moe = Plan(scenario, replace(prediction.strategy, ep=8, sequence_parallel=True), prediction.to_dict(), "t", "n")
    args = megatron_args(export_plan(moe, "megatron").files["megatron_args.sh"])
    config = config_module.TransformerConfig(
        num_layers=int(args["--num-layers"][0]), hidden_size=int(args["--hidden-size"][0]),
        num_attention_heads=int(args["--num-attention-heads"][0]), num_query_groups=int(args["--num-query-groups"][0]),
        ffn_hidden_size=int(args["--ffn-hidden-size"][0]), tensor_model_parallel_size=2, sequence_parallel=True,
        num_moe_experts=int(args["--num-experts"][0]), moe_router_topk=int(args["--moe-router-topk"][0]),
        moe_ffn_hidden_size=int(args["--moe-ffn-hidden-size"][0]),
        expert_model_parallel_size=int(args["--expert-model-parallel-size"][0]),
        moe_token_dispatcher_type=args["--moe-token-dispatcher-type"][0], bf16=True,
        add_bias_linear="--disable-bias-linear" not in args)
    assert (config.num_moe_experts, config.moe_router_topk, config.expert_model_parallel_size) == (8, 2, 8)


def test_deepspeed_reads_the_zero3_settings():
    zero_config = need("deepspeed.runtime.zero.config")
    plan = knob_plan(Strategy(1, 1, 32, 1, zero_stage=3))
    settings = json.loads(export_plan(plan, "deepspeed").files["ds_config.json"])["zero_optimization"]
    parsed = zero_config.DeepSpeedZeroConfig(**settings)
    assert int(parsed.stage) == 3 and parsed.prefetch_bucket_size == settings["stage3_prefetch_bucket_size"]
    assert parsed.param_persistence_threshold == settings["stage3_param_persistence_threshold"]
    assert parsed.reduce_bucket_size == settings["reduce_bucket_size"] and parsed.overlap_comm is True


