"""The runs issue 26 quotes, replayed as a user would write them: checks, not fits. No parameter was
fitted to them (the eager and compiled element-wise factors were set knowing the two micro-batch
32 rows: spec/frameworks.py). Before the issue the model said 0.185 s / 59 GiB, 0.285 s and
"no way to say compiled" for the three H200 rows, and 131 GiB of H200 for a 129.6 GiB run."""

from __future__ import annotations

import pytest

from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.validation.runs import parse_run

GIB = 2**30


def _h200_gpt2_medium(micro_batch: int, compile_mode: bool = False) -> dict:
    training = {"framework": "Hugging Face transformers (plain PyTorch)", "precision": "bf16 autocast",
                "tp": 1, "pp": 1, "dp": 1, "micro_batch": micro_batch, "global_batch": 32, "recompute": "none",
                "zero": "none"}
    if compile_mode:
        training["notes"] = "torch.compile"
    return {"id": f"h200-gpt2m-{micro_batch}-{compile_mode}", "source": {"title": "issue 26"},
            "model": {"name": "GPT-2 medium", "layers": 24, "hidden": 1024, "heads": 16, "vocab": 50257, "seq_len": 1024},
            "cluster": {"name": "one H200", "gpu": "H200", "num_gpus": 1, "gpus_per_node": 1,
                        "intra_node": "none", "inter_node": "none"},
            "training": training, "measured": {"iteration_time_s": 1.0}}


def _predict(run: dict):
    case = parse_run(run)
    assert case.scenario is not None and not case.data_gaps, case.data_gaps
    return case, evaluate(case.scenario, case.strategy)


@pytest.mark.parametrize("micro_batch, compile_mode, seconds, peak_gib, time_band", [
    (32, False, 0.356, 88.0, 0.20), (1, False, 1.99, None, 0.15), (32, True, 0.190, 43.0, 0.15)])
def test_gpt2_medium_on_one_h200_as_measured(micro_batch, compile_mode, seconds, peak_gib, time_band):
    case, p = _predict(_h200_gpt2_medium(micro_batch, compile_mode))
    assert case.scenario.training.framework == "pytorch" and case.scenario.training.compile is compile_mode
    assert p.fits_memory
    assert p.iteration_time_s == pytest.approx(seconds, rel=time_band)
    if peak_gib:
        assert p.peak_memory_bytes / GIB == pytest.approx(peak_gib, rel=0.15)


def test_micro_batch_one_is_bound_by_issuing_kernels():
    _, p = _predict(_h200_gpt2_medium(1))
    assert p.time_terms()["kernel issue (host)"] > 0.7 * p.iteration_time_s


def test_a_small_gpt_at_tp8_micro_batch_1_is_no_longer_predicted_several_times_too_fast():
    """Megatron-DeepSpeed, GPT hidden 1024, 24 layers, tp 8, micro-batch 1, one 8 x A100 node:
    measured 1.95 s (global batch not quoted: 32 here), predicted 0.30-0.38 s before; now the
    host's issue time and NCCL's latency bring it within a third."""
    run = {"id": "mds-tp8", "source": {"title": "issue 26"},
           "model": {"name": "GPT", "layers": 24, "hidden": 1024, "heads": 16, "vocab": 50257, "seq_len": 1024},
           "cluster": {"name": "8 x A100", "gpu": "A100 40GB", "num_gpus": 8, "gpus_per_node": 8,
                       "intra_node": "NVSwitch", "inter_node": "none"},
           "training": {"framework": "Megatron-DeepSpeed", "precision": "fp16", "tp": 8, "pp": 1, "dp": 1,
                        "micro_batch": 1, "global_batch": 32, "recompute": "none", "zero": "none"},
           "measured": {"iteration_time_s": 1.95}}
    _, p = _predict(run)
    terms = p.time_terms()
    assert p.iteration_time_s > 1.95 * 2 / 3
    assert terms["kernel issue (host)"] > terms["compute"] and terms["tensor-parallel latency"] > 0
