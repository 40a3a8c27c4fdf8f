"""Engine exports: every preset's best plan as Megatron, DeepSpeed, torchtitan, torchrun and rank-map files.

Each check reads the exported text back the way the engine would (shell words, JSON, CSV, the
DeepSpeed hostfile rule, TOML) and compares it with the plan and with `build_layout`. Tests at the end
run the engines' own checkers (torch, DeepSpeed, Megatron-Core) when those are installed; the
project does not depend on them, so they are skipped otherwise.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.placement import build_layout
from amp_tui.core.plans.exports import EXPORT_FORMATS, export_plan
from amp_tui.core.plans.exports.common import Export
from amp_tui.core.plans.exports.deepspeed import deepspeed_zero_stage
from amp_tui.core.plans.exports.torchtitan import job_config
from amp_tui.core.plans.exports.megatron import (
    blocks_per_stage,
    has_megatron_shape,
    expressible_splits,
    layer_partition,
    layout_string,
    megatron_split,
)
from amp_tui.core.plans.planfile import Plan, load_plan, save_plan
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.spec.knobs import resolve
from amp_tui.core.spec.presets import load_preset, preset_names
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy

SCENARIOS = [name for name in preset_names("scenarios")
             if not name.startswith("bench-") and "training" in load_preset("scenarios", name)]
HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")   # DeepSpeed 0.19.8 launcher/runner.py:_parse_hostfile


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """name -> the plan of the scenario's best strategy, saved and loaded back (one search each)."""
    cache: dict = {}
    folder = tmp_path_factory.mktemp("plans")

    def get(name: str) -> Plan:
        if name not in cache:
            scenario = load_scenario(name)
            path = save_plan(folder / f"{name}.yaml", scenario, search(scenario).strategies[0])
            cache[name] = load_plan(path)
        return cache[name]

    return get


def plan_for(scenario, strategy: Strategy) -> Plan:
    prediction = evaluate(scenario, strategy)
    return Plan(scenario, prediction.strategy, prediction.to_dict(), "test", "now")


def megatron_args(text: str) -> dict[str, list[str]]:
    """The MEGATRON_ARGS array as bash would read it: flag -> its values."""
    body = text[text.index("MEGATRON_ARGS=(") + len("MEGATRON_ARGS=("): text.index("\n)")]
    words = shlex.split(body, comments=True)
    args: dict[str, list[str]] = {}
    for word in words:
        if word.startswith("--"):
            assert word not in args, f"{word} given twice"
            args[word] = []
            last = word
        else:
            args[last].append(word)
    return args


def torchrun_lines(text: str) -> list[list[str]]:
    return [shlex.split(line[line.index("torchrun"):], comments=True)
            for line in text.splitlines() if "exec torchrun" in line]


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def bash_syntax_ok(text: str, tmp_path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        return
    script = tmp_path / "script.sh"
    script.write_text(text)
    result = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_exports_import_no_ui_and_no_engine():
    """Plan files and exports belong to the pure core: no Textual/Rich, and no training engine."""
    code = ("import sys, amp_tui.core.plans.planfile, amp_tui.core.plans.exports.megatron, amp_tui.core.plans.exports.deepspeed, "
            "amp_tui.core.plans.exports.torchrun, amp_tui.core.plans.exports.rankmap, amp_tui.core.plans.exports.torchtitan; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'textual', 'rich', 'torch', 'deepspeed', 'megatron', 'torchtitan'}))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": root},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- every preset ----------------------------------------------------------------------------------

def megatron_refuses(plan: Plan) -> bool:
    """Plans Megatron-LM cannot run, which its export refuses in one line: a model without a GPT
    shape (no --num-layers: validate_args stops), or query groups that tp does not divide or multiply."""
    model, tp = plan.scenario.model, plan.strategy.tp
    if not has_megatron_shape(model):
        return True
    groups = model.shape.get("num_kv_heads", model.shape["num_heads"])
    return bool(groups % tp and tp % groups)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_format_exports(name, plans):
    for fmt in EXPORT_FORMATS:
        if fmt == "megatron" and megatron_refuses(plans(name)):
            with pytest.raises(SpecError) as info:
                export_plan(plans(name), fmt)
            assert info.value.field in ("model", "strategy.tp") and "\n" not in str(info.value)
            continue
        export = export_plan(plans(name), fmt)
        assert isinstance(export, Export) and export.files
        assert all(isinstance(text, str) and text.endswith("\n") for text in export.files.values())
        assert all(isinstance(note, str) and "\n" not in note for note in export.notes)


def test_unknown_format(plans):
    with pytest.raises(SpecError) as info:
        export_plan(plans("paper-homogeneous"), "slurm")
    assert info.value.field == "format" and all(fmt in info.value.reason for fmt in EXPORT_FORMATS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_deepspeed_config_batch_and_world(name, plans):
    plan = plans(name)
    s, scenario = plan.strategy, plan.scenario
    files = export_plan(plan, "deepspeed").files
    config = json.loads(files["ds_config.json"])
    assert s.tp * s.pp * s.dp == scenario.cluster.num_gpus
    assert config["train_batch_size"] == scenario.training.global_batch_size
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * s.dp)
    assert config["train_micro_batch_size_per_gpu"] == s.micro_batch_size
    zero = resolve(s, scenario.training).zero_stage
    assert config["zero_optimization"]["stage"] == (zero if s.pp == 1 else min(zero, 1))
    precision = scenario.training.precision
    assert ("fp16" in config) == (precision == "fp16") and ("bf16" in config) == (precision in ("bf16", "fp8"))


@pytest.mark.parametrize("name", SCENARIOS)
def test_deepspeed_stage_boundaries_cover_every_layer_once(name, plans):
    plan = plans(name)
    partition = json.loads(export_plan(plan, "deepspeed").files["pipeline_partition.json"])
    parts = partition["parts"]
    num_layers = plan.scenario.model.num_layers
    assert parts[0] == 0 and parts[-1] == num_layers == partition["num_layers"]
    assert [b - a for a, b in zip(parts, parts[1:])] == list(plan.strategy.partition)
    covered = [layer for a, b in zip(parts, parts[1:]) for layer in range(a, b)]
    assert covered == list(range(num_layers))
    assert [(st_["first_layer"], st_["last_layer"]) for st_ in partition["stages"]] == \
        [(a, b - 1) for a, b in zip(parts, parts[1:])]
    assert partition["topology"] == {"num_pp": plan.strategy.pp, "num_mp": plan.strategy.tp,
                                     "num_dp": plan.strategy.dp}


@pytest.mark.parametrize("name", SCENARIOS)
def test_deepspeed_hostfile_in_placement_order(name, plans):
    plan = plans(name)
    text = export_plan(plan, "deepspeed").files["hostfile"]
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#") or not line:
            continue
        match = HOSTFILE_LINE.search(line)
        assert match, line
        entries.append((match.group(1), int(match.group(2))))
    layout = build_layout(plan.scenario.cluster, plan.strategy.tp, plan.strategy.pp, plan.strategy.dp,
                          plan.strategy.placement)
    groups = plan.scenario.cluster.nodes
    assert entries == [(f"node-{k}", groups[g].gpus_per_node) for k, g in enumerate(layout.node_group)]
    assert sum(slots for _, slots in entries) == plan.scenario.cluster.num_gpus


@pytest.mark.parametrize("name", SCENARIOS)
def test_rank_map_agrees_with_build_layout(name, plans):
    plan = plans(name)
    s = plan.strategy
    files = export_plan(plan, "rankmap").files
    rows = list(csv.DictReader(io.StringIO(files["rankmap.csv"])))
    document = json.loads(files["rankmap.json"])
    world = plan.scenario.cluster.num_gpus
    assert sorted(int(row["rank"]) for row in rows) == list(range(world))
    assert len(document["ranks"]) == world and document["world_size"] == world
    layout = build_layout(plan.scenario.cluster, s.tp, s.pp, s.dp, s.placement)
    groups = plan.scenario.cluster.nodes
    bounds = [0]
    for count in s.partition:
        bounds.append(bounds[-1] + count)
    seats = Counter()
    for row, entry in zip(rows, document["ranks"]):
        rank = int(row["rank"])
        assert {k: str(v) for k, v in entry.items()} == row
        node = int(row["node"])
        assert node == layout.rank_node[rank]
        assert int(row["node_group"]) == layout.node_group[node]
        assert int(row["local_gpu"]) == layout.rank_local_gpu[rank]
        assert row["gpu"] == groups[int(row["node_group"])].gpu.name
        stage, replica, tp_rank = int(row["stage"]), int(row["dp_replica"]), int(row["tp_rank"])
        assert rank == tp_rank + s.tp * (replica + s.dp * stage)
        assert (int(row["first_layer"]), int(row["last_layer"])) == (bounds[stage], bounds[stage + 1] - 1)
        seats[(node, int(row["local_gpu"]))] += 1
    assert max(seats.values()) == 1   # no GPU holds two ranks


@pytest.mark.parametrize("name", SCENARIOS)
def test_torchrun_lines(name, plans, tmp_path):
    plan = plans(name)
    text = export_plan(plan, "torchrun").files["launch.sh"]
    lines = torchrun_lines(text)
    cluster = plan.scenario.cluster
    layout = build_layout(cluster, plan.strategy.tp, plan.strategy.pp, plan.strategy.dp, plan.strategy.placement)
    assert len(lines) == cluster.num_nodes
    assert sorted(int(option(w, "--node-rank")) for w in lines) == list(range(cluster.num_nodes))
    for words in lines:
        rank = int(option(words, "--node-rank"))
        assert int(option(words, "--nnodes")) == cluster.num_nodes
        assert int(option(words, "--nproc-per-node")) == cluster.nodes[layout.node_group[rank]].gpus_per_node
        assert option(words, "--rdzv-backend") == "static"   # c10d would ignore --node-rank
    assert sum(int(option(w, "--nproc-per-node")) for w in lines) == cluster.num_gpus
    bash_syntax_ok(text, tmp_path)


@pytest.mark.parametrize("name", SCENARIOS)
def test_megatron_args_parse_back(name, plans, tmp_path):
    plan = plans(name)
    if megatron_refuses(plan):      # refused in one line: test_every_format_exports
        return
    s, scenario = plan.strategy, plan.scenario
    text = export_plan(plan, "megatron").files["megatron_args.sh"]
    bash_syntax_ok(text, tmp_path)
    args = megatron_args(text)
    assert args["--tensor-model-parallel-size"] == [str(s.tp)]
    assert args["--pipeline-model-parallel-size"] == [str(s.pp)]
    assert args["--micro-batch-size"] == [str(s.micro_batch_size)]
    assert args["--global-batch-size"] == [str(scenario.training.global_batch_size)]
    if "--num-layers" not in args:
        return
    blocks = int(args["--num-layers"][0])
    assert blocks == sum(1 for layer in scenario.model.layers if layer.kind == "block")
    split = split_from_args(args, s.pp)
    assert sum(split) == blocks
    planned = blocks_per_stage(scenario.model, s.partition)
    if megatron_split(planned) is not None or "--pipeline-model-parallel-layout" in args:
        assert split == planned


def parse_layout(layout: str) -> list[list[str]]:
    """Megatron-Core's PipelineParallelLayerLayout.parse_str_to_list (0.13-0.19): commas dropped,
    "(..)*n" then "x*n" unrolled, stages split at "|", one letter per layer."""
    import re

    layout = layout.replace(",", "")
    for pattern in (r'\(([^)]+)\)\*(\d+)', r'(.)\*(\d+)'):
        layout = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), layout)
    stages = [list(stage) for stage in layout.split("|")]
    assert all(letter in "ELtm" for stage in stages for letter in stage)
    return stages


def split_from_args(args: dict[str, list[str]], pp: int) -> tuple[int, ...]:
    """Blocks per stage as Megatron-Core derives them from the layout flag or the first/last flags."""
    blocks = int(args["--num-layers"][0])
    if "--pipeline-model-parallel-layout" in args:
        # Excludes the first/last and the virtual-stage flags (arguments.py, TransformerConfig).
        assert not {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                    "--num-virtual-stages-per-pipeline-rank"} & set(args)
        stages = parse_layout(args["--pipeline-model-parallel-layout"][0])
        flat = [letter for stage in stages for letter in stage]
        assert flat[0] == "E" and flat[-1] == "L" and flat.count("E") == flat.count("L") == 1
        assert flat.count("t") == blocks and len(stages) % pp == 0
        per_chunk = [stage.count("t") for stage in stages]
        return tuple(sum(per_chunk[rank::pp]) for rank in range(pp))     # chunk c on pipeline rank c mod pp
    first = int(args["--decoder-first-pipeline-num-layers"][0]) if "--decoder-first-pipeline-num-layers" in args else None
    last = int(args["--decoder-last-pipeline-num-layers"][0]) if "--decoder-last-pipeline-num-layers" in args else None
    middle_stages = pp - (first is not None) - (last is not None)
    rest = blocks - (first or 0) - (last or 0)
    assert (middle_stages == 0) == (rest == 0)
    if middle_stages:
        assert rest % middle_stages == 0
    middle = rest // middle_stages if middle_stages else 0
    split = [middle] * pp
    if first is not None:
        split[0] = first
    if last is not None:
        split[-1] = last
    return tuple(split)


def test_megatron_llama_gqa_and_training_flags(plans):
    plan = plans("mixed-h100-a100-llama3-8b")
    args = megatron_args(export_plan(plan, "megatron").files["megatron_args.sh"])
    assert args["--group-query-attention"] == [] and args["--num-query-groups"] == ["8"]
    assert args["--num-attention-heads"] == ["32"] and args["--hidden-size"] == ["4096"]
    assert args["--ffn-hidden-size"] == ["14336"] and args["--seq-length"] == ["8192"]
    assert args["--normalization"] == ["RMSNorm"] and args["--position-embedding-type"] == ["rope"]
    assert "--swiglu" in args and "--bf16" in args and "--fp16" not in args
    assert args["--recompute-granularity"] == ["full"] and args["--recompute-method"] == ["uniform"]
    assert args["--recompute-num-layers"] == ["1"]
    assert "--use-distributed-optimizer" in args    # ZeRO-1


def test_megatron_gpt_without_gqa_or_recompute(plans):
    args = megatron_args(export_plan(plans("dgx-a100-gpt3-13b"), "megatron").files["megatron_args.sh"])
    assert "--group-query-attention" not in args and "--swiglu" not in args
    assert "--recompute-granularity" not in args and "--use-distributed-optimizer" not in args
    assert args["--num-layers"] == ["40"] and args["--ffn-hidden-size"] == ["20480"]


def test_megatron_refuses_a_model_without_a_gpt_shape(plans):
    """Megatron-LM 0.16's validate_args stops a run without --num-layers: TransGAN (explicit layers,
    no family, no num_heads) is refused in one line, naming the model."""
    plan = plans("paper-het-model")
    with pytest.raises(SpecError) as info:
        export_plan(plan, "megatron")
    assert (info.value.field, info.value.value) == ("model", plan.scenario.model.name)
    assert "pretrain_gpt.py" in info.value.reason and "torchrun" in info.value.reason


def test_megatron_refuses_query_groups_that_tp_does_not_divide():
    """Megatron-Core 0.16's TransformerConfig: num_query_groups a multiple or divisor of tp (8 groups, tp 3
    is refused; tp 16 over 8 groups is not)."""
    with pytest.raises(SpecError) as info:
        export_plan(plan_for(load_scenario("gb200-nvl72-mixtral-8x22b"), Strategy(3, 1, 24, 1)), "megatron")
    assert info.value.field == "strategy.tp" and info.value.value == 3 and "query groups (8)" in info.value.reason


# -- Megatron's uneven pipeline split ----------------------------------------------------------------

@pytest.fixture(scope="module")
def het_cluster():
    scenario = load_scenario("paper-het-cluster")    # 30 layers: embedding, noop, 24 blocks, 4 others
    return scenario, CostModel(scenario)


def test_layer_partition_keeps_embedding_first_and_head_last(het_cluster):
    scenario, _ = het_cluster
    model = scenario.model
    for split in expressible_splits(24, 4):
        partition = layer_partition(model, split.blocks)
        assert sum(partition) == model.num_layers and min(partition) >= 1
        assert blocks_per_stage(model, partition) == split.blocks
        kinds = [layer.kind for layer in model.layers]
        assert kinds[: partition[0]].count("embedding") == kinds.count("embedding")
        assert kinds[-partition[-1]:].count("head") == kinds.count("head")


def test_expressible_splits_are_exactly_those_megatron_accepts():
    for pp in (1, 2, 3, 4, 5):
        found = {split.blocks for split in expressible_splits(12, pp)}
        brute = set()
        import itertools
        for blocks in itertools.product(range(1, 13), repeat=pp):
            if sum(blocks) == 12 and (pp < 3 or len(set(blocks[1:-1])) == 1):
                brute.add(blocks)
        assert found == brute
        assert all(megatron_split(blocks) is not None for blocks in found)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=29), min_size=3, max_size=3, unique=True))
def test_megatron_split_for_any_partition(het_cluster, cuts):
    """Any 4-stage partition: its own split when Megatron can say it, else the fastest that it can."""
    scenario, cost = het_cluster
    bounds = [0, *sorted(cuts), 30]
    partition = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    plan = plan_for(scenario, Strategy(1, 4, 4, 1, partition, (0, 1)))
    export = export_plan(plan, "megatron")
    split = split_from_args(megatron_args(export.files["megatron_args.sh"]), 4)
    planned = blocks_per_stage(scenario.model, partition)
    if megatron_split(planned) is not None:
        assert split == planned
        return
    assert any("cannot be expressed" in note for note in export.notes)
    assert any(layout_string(planned) in note for note in export.notes)
    candidate = cost.candidate(1, 4, 4, 1, (0, 1))

    def key(blocks):
        prediction = candidate.predict(layer_partition(scenario.model, blocks))
        return (not prediction.fits_memory, prediction.iteration_time_s)

    assert key(split) == min(key(other.blocks) for other in expressible_splits(24, 4))
    written = candidate.predict(layer_partition(scenario.model, split)).iteration_time_s
    assert any(f"predicted {written:.4g} s per iteration" in note for note in export.notes)


def test_megatron_says_when_it_runs_other_layers_than_the_plan():
    """Layers between blocks go with the block before them in Megatron; a plan that puts one after a
    cut elsewhere gets a note with the cost of Megatron's layout."""
    from tests.core.core_builders import adapter_scenario

    scenario = adapter_scenario()
    plan = plan_for(scenario, Strategy(1, 2, 1, 1, (5, 6), (0,)))
    assert layer_partition(scenario.model, (4, 4)) == (6, 5)
    export = export_plan(plan, "megatron")
    assert split_from_args(megatron_args(export.files["megatron_args.sh"]), 2) == (4, 4)
    assert any("[6, 5] rather than the plan's [5, 6]" in note for note in export.notes)


def test_no_split_when_there_are_fewer_blocks_than_stages():
    assert list(expressible_splits(3, 4)) == []
    assert megatron_split((1, 0, 1, 1)) is None


def test_layout_string():
    assert layout_string((3, 1, 0, 2)) == "Et*3|t||t*2L"
    assert layout_string((24,)) == "Et*24L"


def test_training_settings_without_an_engine_flag_get_notes():
    scenario = load_scenario("paper-homogeneous").with_training(precision="fp32", schedule="gpipe", zero_stage=2,
                                                                  recompute="full")
    piped = plan_for(scenario, Strategy(1, 2, 8, 1, None, (0,)))
    megatron = export_plan(piped, "megatron")
    args = megatron_args(megatron.files["megatron_args.sh"])
    assert "--fp16" not in args and "--bf16" not in args and "--use-distributed-optimizer" in args
    assert args["--recompute-granularity"] == ["full"]
    for word in ("fp32", "GPipe", "ZeRO-2"):
        assert any(word in note for note in megatron.notes), word
    deepspeed = export_plan(piped, "deepspeed")
    config = json.loads(deepspeed.files["ds_config.json"])
    assert "fp16" not in config and "bf16" not in config
    assert config["pipeline"]["activation_checkpoint_interval"] == 1
    assert any("GPipe" in note for note in deepspeed.notes)
    flat = export_plan(plan_for(scenario, Strategy(1, 1, 16, 1, None, (0,))), "deepspeed")
    assert json.loads(flat.files["ds_config.json"])["zero_optimization"]["stage"] == 2
    assert "planned_pipeline.py" not in flat.files
    assert any("checkpoint" in note for note in flat.notes)


def test_deepspeed_zero2_with_a_pipeline_drops_to_stage_1():
    scenario = load_scenario("paper-het-cluster").with_training(zero_stage=2)
    plan = plan_for(scenario, Strategy(1, 2, 8, 1, None, (0, 1)))
    export = export_plan(plan, "deepspeed")
    assert json.loads(export.files["ds_config.json"])["zero_optimization"]["stage"] == 1
    assert any("ZeRO stages 0 and 1" in note for note in export.notes)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_launch_lines_hostfile_and_rank_map_agree_on_node_order(data):
    """Any placement and degrees on a cluster with 8- and 4-GPU nodes: the three exports list the same
    nodes in the same order, and that order is build_layout's."""
    scenario = _mixed_scenario()
    gpus = scenario.cluster.num_gpus
    tp = data.draw(st.sampled_from([1, 2, 4]))
    pp = data.draw(st.sampled_from([p for p in (1, 2, 4, 8) if gpus % (tp * p) == 0]))
    dp = gpus // (tp * pp)
    gbs = scenario.training.global_batch_size
    mbs = data.draw(st.sampled_from([m for m in (1, 2, 4) if gbs % (dp * m) == 0]))
    placement = tuple(data.draw(st.permutations(range(len(scenario.cluster.nodes)))))
    plan = plan_for(scenario, Strategy(tp, pp, dp, mbs, None, placement))
    layout = build_layout(scenario.cluster, tp, pp, dp, placement)
    expected = [scenario.cluster.nodes[g].gpus_per_node for g in layout.node_group]
    launch = sorted((int(option(w, "--node-rank")), int(option(w, "--nproc-per-node")))
                    for w in torchrun_lines(export_plan(plan, "torchrun").files["launch.sh"]))
    hosts = [int(line.split("slots=")[1]) for line in export_plan(plan, "deepspeed").files["hostfile"].splitlines()
             if not line.startswith("#")]
    nodes = json.loads(export_plan(plan, "rankmap").files["rankmap.json"])["nodes"]
    assert [n for _, n in launch] == hosts == [node["gpus"] for node in nodes] == expected
    assert [node["node_group"] for node in nodes] == [int(g) for g in layout.node_group]


_MIXED: list = []


def _mixed_scenario():
    if not _MIXED:
        _MIXED.append(load_scenario("mixed-a100-a10g-llama2-13b"))   # 2 x 8 A100 + 4 x 4 A10G
    return _MIXED[0]


# -- torchtitan --------------------------------------------------------------------------------------

def torchtitan_config(plan: Plan) -> dict:
    """The settings torchtitan_job.py sets, after checking that the file is Python that sets them."""
    export = export_plan(plan, "torchtitan")
    text = export.files["torchtitan_job.py"]
    ast.parse(text)
    config = job_config(plan)
    for section in ("training", "parallelism", "compile"):
        for key, value in config[section].items():
            assert f"    config.{section}.{key} = {value!r}\n" in text
    return config


@pytest.mark.parametrize("name", SCENARIOS)
def test_torchtitan_job_config_reads_back(name, plans):
    plan = plans(name)
    s, scenario = plan.strategy, plan.scenario
    knobs = resolve(s, scenario.training)
    config = torchtitan_config(plan)
    par, training = config["parallelism"], config["training"]
    degrees = (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"])
    # DDP only for ZeRO 0 without tp and pp: torchtitan's mixed precision under TP or PP comes through
    # FSDP alone, so such a plan is written as FSDP (issue 28, major 3).
    ddp = knobs.zero_stage == 0 and s.tp == 1 and s.pp == 1
    assert degrees == ((s.dp, 1) if ddp else (1, s.dp))
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"]) == \
        (s.tp, s.pp, knobs.cp)
    # torchtitan's ParallelDims: dp_replicate x dp_shard x cp x tp x pp = world size.
    assert degrees[0] * degrees[1] * knobs.cp * s.tp * s.pp == scenario.cluster.num_gpus
    # Its trainer: global = local x data-parallel degree x accumulation steps, a whole number of them.
    accumulation, rest = divmod(training["global_batch_size"], training["local_batch_size"] * s.dp)
    assert rest == 0 and training["global_batch_size"] == scenario.training.global_batch_size
    assert training["local_batch_size"] * s.dp * accumulation == scenario.training.global_batch_size
    assert par["pipeline_parallel_microbatch_size"] == s.micro_batch_size
    if s.pp > 1:   # the whole per-replica batch goes through the pipeline in micro-batches
        assert training["local_batch_size"] == s.micro_batch_size * plan.strategy.num_micro_batches(
            scenario.training.global_batch_size)
    assert training["seq_len"] == scenario.model.sequence_length
    assert par["pipeline_parallel_schedule"] == {"1f1b": "1F1B", "gpipe": "GPipe"}[scenario.training.schedule]
    assert config["compile"]["enable_async_tensor_parallel"] is False
    assert config["activation_checkpoint"]["mode"] == knobs.recompute
    parts = par.get("module_fqns_per_model_part")
    if s.pp > 1 and scenario.model.family:
        assert [len(part) for part in parts][1:-1] == list(s.partition)[1:-1]   # one module per layer
        flat = [name for part in parts for name in part]
        blocks = sum(1 for layer in scenario.model.layers if layer.kind == "block")
        assert flat == ["tok_embeddings", *[f"layers.{i}" for i in range(blocks)], "norm", "lm_head"]
    elif s.pp == 1:
        assert parts is None


def test_torchtitan_names_llama3_flavors_and_flags_the_rest(plans):
    assert torchtitan_config(plans("mixed-h100-a100-llama3-8b"))["model"] == {"name": "llama3", "flavor": "8B"}
    export = export_plan(plans("dgx-a100-gpt3-13b"), "torchtitan")
    assert torchtitan_config(plans("dgx-a100-gpt3-13b"))["model"]["flavor"] == "gpt3-13b"
    assert "BASE_CONFIG\", '')" in export.files["torchtitan_job.py"]     # no torchtitan config to start from
    assert any("no flavor for gpt3-13b" in note for note in export.notes)


def test_job_file_names_stay_in_one_docstring_line():
    scenario = load_scenario("paper-homogeneous")
    odd = 'say "hi" \\ tab\there\nnew line \x01 """'
    scenario = replace(scenario, name=odd)
    plan = plan_for(scenario, Strategy(1, 2, 8, 1, None, (0,)))
    text = export_plan(plan, "torchtitan").files["torchtitan_job.py"]
    module = ast.parse(text)
    docstring = ast.get_docstring(module)
    first = docstring.splitlines()[0]
    # quotes and backslashes survive; line breaks and control characters do not end the line
    assert 'say "hi" \\ tab' in first and "new line" in first and "\x01" not in docstring
    assert len(module.body) > 1 and all(not isinstance(node, ast.Expr) for node in module.body[1:])


# -- today's techniques: SP, CP, interleaving, selective recomputation, ZeRO-3, fp8, experts -------------

B200_SCENARIO = {"name": "b200", "cluster": {"preset": "4x-dgx-b200"}, "model": {"preset": "llama3.1-8b"},
                 "training": {"global_batch_size": 64, "precision": "bf16"}}


def knob_plan(strategy: Strategy, **training) -> Plan:
    """A plan whose strategy states its techniques, predicted with them."""
    scenario = parse_scenario({**B200_SCENARIO, "training": {**B200_SCENARIO["training"], **training}})
    prediction = evaluate(scenario, strategy)
    planned = replace(strategy, partition=strategy.partition or prediction.strategy.partition,
                      placement=prediction.strategy.placement)
    return Plan(scenario, planned, prediction.to_dict(), "test", "now")


def test_megatron_flags_of_todays_techniques():
    plan = knob_plan(Strategy(4, 2, 4, 1, (17, 17), recompute="selective", zero_stage=1, sequence_parallel=True,
                              virtual_stages=2))
    export = export_plan(plan, "megatron")
    text = export.files["megatron_args.sh"]
    args = megatron_args(text)
    assert "--sequence-parallel" in args and args["--num-virtual-stages-per-pipeline-rank"] == ["2"]
    assert args["--recompute-granularity"] == ["selective"] and "--recompute-method" not in args
    assert "--use-distributed-optimizer" in args and "--use-megatron-fsdp" not in args
    assert "distributed optimizer" in text                      # the header names ZeRO-1 as Megatron does
    assert split_from_args(args, 2) == (16, 16)                 # 32 blocks, each stage a multiple of 2
    assert not any("will refuse" in note for note in export.notes)


def test_megatron_context_parallel_fp8_and_fsdp():
    plan = knob_plan(Strategy(8, 1, 4, 1, cp=1), precision="fp8", zero_stage=3, recompute="full",
                     context_parallel=2)
    args = megatron_args(export_plan(plan, "megatron").files["megatron_args.sh"])
    assert "--context-parallel-size" not in args          # the strategy's own cp 1 wins over the training section
    # a silent strategy takes the training section's cp 2, which takes its share of the GPUs
    export = export_plan(replace(plan, strategy=replace(plan.strategy, cp=None, dp=2)), "megatron")
    args = megatron_args(export.files["megatron_args.sh"])
    assert args["--context-parallel-size"] == ["2"]          # silent strategy: the training section's
    assert any("tensor, then context, then data" in note for note in export.notes)
    assert args["--fp8-format"] == ["hybrid"] and "--bf16" in args
    assert args["--fp8-amax-compute-algo"] == ["max"] and args["--fp8-amax-history-len"] == ["1024"]
    assert args["--data-parallel-sharding-strategy"] == ["optim_grads_params"] and "--use-megatron-fsdp" in args
    assert args["--recompute-granularity"] == ["full"]


def test_fp4_exports_nvfp4_to_megatron_and_is_refused_by_torchtitan():
    plan = knob_plan(Strategy(2, 2, 8, 1), precision="fp4")
    export = export_plan(plan, "megatron")
    args = megatron_args(export.files["megatron_args.sh"])
    assert args["--fp4-format"] == ["e2m1"] and args["--fp4-recipe"] == ["nvfp4"] and "--bf16" in args
    assert "--fp8-format" not in args and any(note.startswith("fp4:") for note in export.notes)
    config = json.loads(export_plan(plan, "deepspeed").files["ds_config.json"])
    assert config["bf16"] == {"enabled": True} and "fp16" not in config
    with pytest.raises(SpecError) as info:
        export_plan(plan, "torchtitan")
    assert info.value.field == "training.precision" and "\n" not in str(info.value)


def test_megatron_states_the_chunks_when_interleaving_cannot_split_the_stages():
    """Blocks per stage not divisible by the virtual stages: the layout flag (not a note) states the
    plan's 8 chunks, in place of the virtual-stage flag it excludes (issue 28, major 4)."""
    plan = knob_plan(Strategy(4, 2, 4, 1, (10, 24), virtual_stages=4))   # 9 and 23 blocks
    export = export_plan(plan, "megatron")
    args = megatron_args(export.files["megatron_args.sh"])
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    assert any("not in multiples of 4" in note for note in export.notes)
    # chunk a * pp + s on rank s, E first, L last
    layout = args["--pipeline-model-parallel-layout"][0]
    assert layout == "Et*3|t*6|t*2|t*6|t*2|t*6|t*2|t*5L"
    assert split_from_args(args, 2) == (9, 23)
    per_chunk = [int(c.strip("EL").split("*")[1]) if "*" in c else c.strip("EL").count("t") for c in layout.split("|")]
    assert (sum(per_chunk[0::2]), sum(per_chunk[1::2])) == (9, 23)


def test_mixture_of_experts_flags():
    scenario = parse_scenario({**B200_SCENARIO, "model": {"preset": "mixtral-8x7b"}})
    prediction = evaluate(scenario, Strategy(2, 2, 8, 1))
    plan = Plan(scenario, replace(prediction.strategy, ep=4, sequence_parallel=True), prediction.to_dict(), "t", "n")
    args = megatron_args(export_plan(plan, "megatron").files["megatron_args.sh"])
    assert args["--num-experts"] == ["8"] and args["--moe-router-topk"] == ["2"]
    assert args["--moe-ffn-hidden-size"] == ["14336"] and args["--expert-model-parallel-size"] == ["4"]
    assert args["--moe-token-dispatcher-type"] == ["alltoall"] and "--sequence-parallel" in args
    assert torchtitan_config(plan)["parallelism"]["expert_parallel_degree"] == 4
    deepspeed = export_plan(plan, "deepspeed")
    assert any("ep_size=4" in note for note in deepspeed.notes)
    without_sp = export_plan(replace(plan, strategy=replace(plan.strategy, sequence_parallel=False)), "megatron")
    assert any("requires --sequence-parallel" in note for note in without_sp.notes)


def test_torchtitan_of_todays_techniques():
    plan = knob_plan(Strategy(4, 2, 4, 1, recompute="selective", zero_stage=3, virtual_stages=2), precision="fp8")
    config = torchtitan_config(plan)
    par = config["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (1, 4)
    assert par["fsdp_reshard_after_forward"] == "always"
    parts = par["module_fqns_per_model_part"]
    assert len(parts) == 4 and [name for part in parts for name in part][0] == "tok_embeddings"
    assert max(map(len, parts)) - min(map(len, parts)) <= 1       # near-even chunks
    assert config["activation_checkpoint"] == {"mode": "selective"}
    # torchtitan 0.3's Float8LinearConverter scales per row only: a tensorwise plan is written rowwise, with a warning
    assert config["float8"] == {"recipe_name": "rowwise", "filter_fqns": ["lm_head"]}
    assert any("rowwise, not the plan's tensorwise" in w for w in export_plan(plan, "torchtitan").warnings)
    rowwise = knob_plan(Strategy(4, 2, 4, 1, recompute="selective", zero_stage=3, virtual_stages=2),
                        precision="fp8", fp8_scaling="rowwise")
    assert torchtitan_config(rowwise)["float8"]["recipe_name"] == "rowwise"
    assert not export_plan(rowwise, "torchtitan").warnings
    assert any("rowwise scaling" in note for note in export_plan(rowwise, "torchtitan").notes)
    for fmt in ("megatron", "deepspeed"):       # Transformer Engine scales per tensor or per block
        with pytest.raises(SpecError, match="fp8_scaling.*per row"):
            export_plan(rowwise, fmt)
    ddp = torchtitan_config(knob_plan(Strategy(1, 1, 32, 1, zero_stage=0)))
    assert (ddp["parallelism"]["data_parallel_replicate_degree"], ddp["parallelism"]["data_parallel_shard_degree"]) \
        == (32, 1)


def test_deepspeed_zero3_config():
    plan = knob_plan(Strategy(1, 1, 32, 1, zero_stage=3))
    config = json.loads(export_plan(plan, "deepspeed").files["ds_config.json"])
    zero = config["zero_optimization"]
    assert zero["stage"] == 3 == deepspeed_zero_stage(plan)
    assert zero["reduce_bucket_size"] == 4096 * 4096 and zero["stage3_prefetch_bucket_size"] == int(0.9 * 4096 * 4096)
    assert zero["stage3_param_persistence_threshold"] == 10 * 4096
    assert zero["overlap_comm"] is True and zero["contiguous_gradients"] is True
    assert config["train_batch_size"] == 64 == config["train_micro_batch_size_per_gpu"] * 32 * \
        config["gradient_accumulation_steps"]
    piped = knob_plan(Strategy(1, 2, 16, 1, zero_stage=3, virtual_stages=2))
    export = export_plan(piped, "deepspeed")
    assert json.loads(export.files["ds_config.json"])["zero_optimization"] == {"stage": 1}
    assert any("ZeRO-3 prediction" in note for note in export.notes)
    assert any("no interleaved schedule" in note for note in export.notes)


def test_deepspeed_refuses_context_parallelism():
    plan = knob_plan(Strategy(8, 1, 2, 1, cp=2))
    with pytest.raises(SpecError) as info:
        export_plan(plan, "deepspeed")
    assert info.value.field == "strategy.cp" and info.value.value == 2 and "context parallelism" in info.value.reason


def test_hsdp_in_every_format():
    """HSDP over 4 nodes of 8: shard within a node (8 dp ranks), replicate across the 4 nodes.
    torchtitan: dp_replicate 4 x dp_shard 8; Megatron-FSDP: 4 distributed-optimizer instances
    (intra-partial dp = dp x cp / 4 = 8); DeepSpeed has no hybrid sharding and refuses in one line."""
    plan = knob_plan(Strategy(1, 1, 32, 1, zero_stage=3, hsdp_shard=8))
    par = torchtitan_config(plan)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (4, 8)
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * par["context_parallel_degree"] \
        * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"] == 32
    export = export_plan(plan, "megatron")
    args = megatron_args(export.files["megatron_args.sh"])
    assert args["--num-distributed-optimizer-instances"] == ["4"] and "--use-megatron-fsdp" in args
    assert args["--data-parallel-sharding-strategy"] == ["optim_grads_params"]
    assert any("HSDP" in note for note in export.notes)
    plain = megatron_args(export_plan(knob_plan(Strategy(1, 1, 32, 1, zero_stage=3)), "megatron")
                          .files["megatron_args.sh"])
    assert "--num-distributed-optimizer-instances" not in plain
    with pytest.raises(SpecError) as info:
        export_plan(plan, "deepspeed")
    assert info.value.field == "strategy.hsdp_shard" and info.value.value == 8 and "hybrid sharding" in info.value.reason


def test_exports_use_the_experts_degree_the_training_section_fixes():
    """A strategy silent on ep inherits the training section's expert_parallel, in every format."""
    scenario = parse_scenario({**B200_SCENARIO, "model": {"preset": "mixtral-8x7b"},
                               "training": {**B200_SCENARIO["training"], "expert_parallel": 2}})
    prediction = evaluate(scenario, Strategy(2, 2, 8, 1, sequence_parallel=True))
    plan = Plan(scenario, replace(prediction.strategy, ep=None), prediction.to_dict(), "t", "n")
    args = megatron_args(export_plan(plan, "megatron").files["megatron_args.sh"])
    assert args["--expert-model-parallel-size"] == ["2"]
    assert torchtitan_config(plan)["parallelism"]["expert_parallel_degree"] == 2
    assert any("ep_size=2" in note for note in export_plan(plan, "deepspeed").notes)
