"""`validate --runs` reads the stacks, precisions and memory figures of older and smaller runs
(issue 35): Megatron-LM 1.x, Megatron-DeepSpeed and DeepSpeed's pipeline engine of 2020-2022 as
their dated stacks, fp32 with TF32 matrix multiplies, what a peak-memory figure counts, runs that
ran out of memory."""

from __future__ import annotations

import copy

import pytest

from amp_tui.core.validation.replay import run_validation
from amp_tui.core.validation.runs import cases_of, parse_run


def _run(run_id: str = "older-1", **sections) -> dict:
    base = {"id": "older-1", "source": {"title": "a 2021 paper"},
            "model": {"name": "GPT 1.3B", "layers": 24, "hidden": 2048, "heads": 16, "vocab": 50257, "seq_len": 1024},
            "cluster": {"name": "2 x DGX A100", "gpu": "A100 40GB", "num_gpus": 16, "gpus_per_node": 8,
                        "intra_node": "NVLink", "inter_node": "8x 200 Gb/s"},
            "training": {"framework": "Megatron-DeepSpeed", "precision": "bf16", "tp": 2, "pp": 2, "dp": 4,
                         "micro_batch": 4, "global_batch": 64, "recompute": "none", "zero": "ZeRO-1"},
            "measured": {"iteration_time_s": 1.0}}
    run = copy.deepcopy(base)
    run["id"] = run_id
    for section, fields in sections.items():
        run[section] = {k: v for k, v in {**run[section], **fields}.items() if v is not None}
    return run


def _case(**sections):
    case = parse_run(_run(**sections))
    assert case.scenario is not None and not case.data_gaps, case.data_gaps
    return case


@pytest.mark.parametrize("label, framework", [
    ("Megatron-DeepSpeed, bf16, ZeRO-1", "deepspeed-2022"),
    ("DeepSpeed pipeline engine on Megatron GPT-2, fp16", "deepspeed-2020"),
    ("Megatron-LM v1.1.5", "megatron-2020"), ("Megatron-LM (2021)", "megatron-2022"),
    ("DeepSpeed 0.3 pipeline engine", "deepspeed-2020"), ("Megatron-LM", "megatron"), ("NeMo 24.07", "megatron")])
def test_older_stacks_read_as_their_years(label, framework):
    case = _case(training={"framework": label, "precision": "fp16"})
    assert case.scenario.training.framework == framework


def test_megatron_deepspeed_bf16_zero_1_holds_its_fp32_gradients():
    """BF16_Optimizer under ZeRO-1: 2 + 2 + 4 (whole) + 12 / dp bytes per parameter."""
    case = _case()
    stage = run_validation(cases=[case]).replayed[0]
    from amp_tui.core.search.evaluate import evaluate

    memory = evaluate(case.scenario, case.strategy).stages[0].memory
    assert memory.main_gradients_bytes > 0 and memory.main_gradients_bytes == pytest.approx(2 * memory.weights_bytes)
    assert stage.predicted_peak_bytes == max(st.memory.total_bytes for st in evaluate(case.scenario, case.strategy).stages)


@pytest.mark.parametrize("training, expected", [
    ({"precision": "fp32 (TF32 matmuls)"}, "tf32"), ({"precision": "tf32"}, "tf32"),
    ({"precision": "fp32", "tf32": True}, "tf32"), ({"precision": "fp32", "allow_tf32": True}, "tf32"),
    ({"precision": "fp32", "tf32": False}, "fp32"),
    ({"precision": "fp32", "framework": "PyTorch DDP"}, "fp32"),           # PyTorch >= 1.12: off
    ({"precision": "fp32", "framework": "Megatron-LM"}, "tf32"),           # NGC's containers: on
    ({"precision": "fp32, TF32 off", "framework": "Megatron-LM"}, "fp32"),
    ({"precision": "fp32", "framework": "Hugging Face, TF32 enabled"}, "tf32")])
def test_fp32_with_tf32_matrix_multiplies(training, expected):
    case = _case(training={"framework": "PyTorch DDP", "tp": 1, "pp": 1, "dp": 16, "zero": None, **training})
    assert case.scenario.training.precision == expected
    assert case.scenario.training.bytes_per_element == 4


def test_tf32_is_priced_at_the_tensor_core_rate_and_fp32_is_not():
    from amp_tui.core.search.evaluate import evaluate

    tf32, fp32 = (_case(training={"framework": "PyTorch DDP", "tp": 1, "pp": 1, "dp": 16, "zero": None,
                                  "precision": p}) for p in ("tf32", "fp32 (TF32 off)"))
    assert fp32.scenario.training.precision == "fp32"
    fast, slow = (evaluate(c.scenario, c.strategy) for c in (tf32, fp32))
    assert fast.iteration_time_s < slow.iteration_time_s / 2        # A100: 156 against 19.5 TFLOP/s


@pytest.mark.parametrize("measured, basis", [
    ({"peak_mem_gb": 30, "peak_mem_note": "nvidia-smi"}, "device"),
    ({"peak_mem_gb": 30, "peak_mem_note": "torch.cuda.max_memory_reserved"}, "reserved"),
    ({"max_memory_allocated_gb": 30}, "allocated"), ({"peak_mem_gb": 30}, "device")])
def test_what_a_peak_memory_figure_counts(measured, basis):
    case = _case(measured=measured)
    assert case.measured.memory_basis == basis and case.measured.peak_memory_bytes == 30 * 2**30


def test_a_run_that_ran_out_of_memory_is_scored_as_such():
    runs = [_run("oom-1", measured={"iteration_time_s": None, "oom": True}), _run("ran-1")]
    validation = run_validation(cases=cases_of(runs))
    assert {r.case.id: r.case.measured.out_of_memory for r in validation.replayed} == {"oom-1": True, "ran-1": False}
