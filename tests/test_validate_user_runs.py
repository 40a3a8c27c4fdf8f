"""`validate --runs` reads what users write (issue 26 item 6): other tools' field names, silent
vocabularies, heads, sequence lengths, degrees and batches, networks named without figures, GPU
labels as vendors and papers write them, the frameworks people run. Every such run is replayed and
every assumption listed on it."""

from __future__ import annotations

import copy

import pytest

from amp_tui.core.spec.frameworks import PROFILES
from amp_tui.core.validation.runs import parse_run


def _run(**sections) -> dict:
    base = {"id": "mine-1", "source": {"title": "my lab"},
            "model": {"name": "GPT 350M", "layers": 24, "hidden": 1024, "heads": 16, "vocab": 50257, "seq_len": 1024},
            "cluster": {"name": "2 nodes", "gpu": "A100 80GB", "num_gpus": 16, "gpus_per_node": 8,
                        "intra_node": "NVLink", "inter_node": "200 Gbps"},
            "training": {"framework": "Megatron-LM", "precision": "bf16", "tp": 1, "pp": 1, "dp": 16,
                         "micro_batch": 4, "global_batch": 64, "recompute": "none", "zero": "none"},
            "measured": {"iteration_time_s": 1.0}}
    run = copy.deepcopy(base)
    for section, fields in sections.items():
        run[section] = {**run[section], **fields}
        run[section] = {k: v for k, v in run[section].items() if v is not None}
    return run


def _case(**sections):
    case = parse_run(_run(**sections))
    assert case.scenario is not None and not case.data_gaps, case.data_gaps
    return case


def test_a_run_without_a_vocabulary_takes_the_familys_and_says_so():
    gpt = _case(model={"vocab": None})
    assert gpt.scenario.model.shape["vocab_size"] == 50257
    assert any("vocabulary not stated" in note for note in gpt.assumptions)
    llama = _case(model={"name": "Llama 2 7B", "hidden": 4096, "layers": 32, "heads": 32, "vocab": None})
    assert llama.scenario.model.family == "llama" and llama.scenario.model.shape["vocab_size"] == 32000
    assert _case(model={"vocab": "32,000"}).scenario.model.shape["vocab_size"] == 32000


def test_hugging_face_and_megatron_field_names_are_read():
    hf = {"name": "GPT-2 medium", "n_layer": 24, "n_embd": 1024, "n_head": 16, "n_positions": 1024, "vocab_size": 50257}
    case = parse_run({**_run(), "model": hf,
                      "training": {"framework": "Hugging Face Trainer", "precision": "bf16",
                                   "tensor_model_parallel_size": 1, "per_device_train_batch_size": 4,
                                   "gradient_accumulation_steps": 2}})
    assert not case.data_gaps, case.data_gaps
    shape = case.scenario.model.shape
    assert (shape["hidden_size"], shape["num_layers"], shape["num_heads"], shape["sequence_length"]) == (1024, 24, 16, 1024)
    assert case.strategy.dp == 16 and case.scenario.training.global_batch_size == 4 * 16 * 2
    assert any("dp not stated" in n for n in case.assumptions)
    assert any("global batch not stated" in n for n in case.assumptions)


def test_heads_and_sequence_length_left_out_get_defaults_noted():
    case = _case(model={"heads": None, "seq_len": None})
    assert case.scenario.model.shape["num_heads"] == 1024 // 64
    assert case.scenario.model.shape["sequence_length"] == 2048
    assert any("heads not stated" in n for n in case.assumptions)
    assert any("sequence length not stated" in n for n in case.assumptions)


@pytest.mark.parametrize("network, gbps", [
    ("Omni-Path", 100), ("Slingshot-11", 200 * 8), ("RoCE v2", 100 * 8), ("HDR InfiniBand", 200 * 8),
    ("not stated", None), ("25GbE", 25), ("100 Gbps", 100), ("8x 200 Gb/s", 1600)])
def test_a_network_named_without_a_figure_gets_a_named_fallback(network, gbps):
    """Fabrics at their usual port rate, one port per GPU on DGX-style boards (the A100 here), one
    per node otherwise (Omni-Path: ports = 1 only where the card has no DGX node; here 8)."""
    case = _case(cluster={"inter_node": network})
    group = case.scenario.cluster.nodes[0]
    if network == "Omni-Path":
        gbps = 100 * 8
    if gbps is None:
        assert any("network not stated" in n for n in case.assumptions)
    else:
        assert group.inter_node_bandwidth == pytest.approx(gbps * 1e9 / 8)
    if not any(ch.isdigit() for ch in network) or network.startswith(("RoCE", "Slingshot")):
        assert any("network" in n for n in case.assumptions)


@pytest.mark.parametrize("label, name", [
    ("Titan-RTX", "TITAN-RTX"), ("TITAN RTX", "TITAN-RTX"), ("GeForce RTX 2080Ti", "RTX-2080Ti"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("A100 40 GB PCIe", "A100-40GB"), ("RTX 3090", "RTX-3090"),
    ("H100 (HBM2e, lower-TDP SXM, 95GB)", "H100-96GB-500W"), ("tesla t4", "T4"), ("GH200", "GH200")])
def test_gpu_labels_as_people_write_them(label, name):
    case = _case(cluster={"gpu": label, "gpus_per_node": 4, "num_gpus": 16, "intra_node": "PCIe",
                          "gpu_mem_gb": None}, training={"dp": 16})
    assert case.scenario.cluster.nodes[0].gpu.name.split(" ")[0] == name


def test_consumer_cards_over_pcie_talk_through_host_memory():
    case = _case(cluster={"gpu": "RTX 3090", "gpus_per_node": 8, "intra_node": "PCIe Gen4", "inter_node": "not stated"},
                 training={"precision": "fp16"})
    group = case.scenario.cluster.nodes[0]
    assert group.intra_link_class == "host" and group.intra_node_bandwidth == pytest.approx(32e9)
    a10g = _case(cluster={"gpu": "A10G", "gpus_per_node": 8, "intra_node": "PCIe Gen4"})
    assert a10g.scenario.cluster.nodes[0].intra_link_class == "pcie"


@pytest.mark.parametrize("label, framework", [
    ("Hugging Face transformers", "pytorch"), ("PyTorch DDP", "pytorch"), ("accelerate + FSDP", "pytorch"),
    ("PyTorch Lightning", "pytorch"), ("Megatron-DeepSpeed", "deepspeed-2022"), ("HF Accelerate + DeepSpeed ZeRO-2", "deepspeed"),
    ("torchtitan", "fsdp"), ("NeMo", "megatron"), ("Megatron-LM", "megatron")])
def test_frameworks_map_to_their_profiles(label, framework):
    case = _case(training={"framework": label})
    assert case.scenario.training.framework == framework and framework in PROFILES


@pytest.mark.parametrize("text, mode", [
    ({"framework": "torchtitan, torch.compile"}, True), ({"notes": "compiled with torch.compile"}, True),
    ({"compile": True}, True), ({"compile": False, "notes": "torch.compile"}, False),
    ({"notes": "eager, no torch.compile"}, False), ({"notes": "torch.compile mode=reduce-overhead"}, "cudagraphs"),
    ({}, False)])
def test_torch_compile_is_read_from_what_the_run_says(text, mode):
    case = _case(training={"framework": "PyTorch FSDP", **text})
    assert case.scenario.training.compile == mode


def test_plain_pytorch_runs_use_sdpa_flash_attention_and_say_so():
    case = _case(training={"framework": "Hugging Face transformers"})
    assert case.scenario.training.attention_kernel == "flash2"
    assert any("SDPA" in n for n in case.assumptions)


@pytest.mark.parametrize("label, stage", [("ZeRO-2", 2), (2, 2), ("stage 1", 1), ("FULL_SHARD", 3),
                                          ("SHARD_GRAD_OP", 2), ("NO_SHARD", 0), ("DeepSpeed ZeRO stage 3", 3)])
def test_zero_labels(label, stage):
    case = parse_run(_run(training={"zero": label}))
    assert case.zero_stage == stage


@pytest.mark.parametrize("label, kind", [(True, "full"), (False, "none"), ("activation checkpointing", "full"),
                                         ("no", "none"), ("selective", "selective")])
def test_recompute_labels(label, kind):
    assert parse_run(_run(training={"recompute": label})).recompute == kind


def test_throughput_becomes_an_iteration_time():
    samples = _case(measured={"iteration_time_s": None, "samples_per_second": 32.0})
    assert samples.measured.iteration_time_s == pytest.approx(64 / 32.0)
    tokens = _case(measured={"iteration_time_s": None, "tokens_per_s": 64 * 1024 / 2.0})
    assert tokens.measured.iteration_time_s == pytest.approx(2.0)
    ms = _case(measured={"iteration_time_s": None, "step_time_ms": 1500})
    assert ms.measured.iteration_time_s == pytest.approx(1.5)
