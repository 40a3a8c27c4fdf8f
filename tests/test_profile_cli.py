"""`amp-tui profile`: refused in one line without torch or without a GPU; end to end on the CPU
(tiny shapes) where torch is installed: profile, plan from it, iterations, calibrate."""

from __future__ import annotations

import re
import sys

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_file

TINY = {"family": "llama", "name": "llama-tiny", "hidden_size": 32, "num_layers": 2, "num_heads": 4,
        "num_kv_heads": 2, "sequence_length": 8, "vocab_size": 64}


def write_scenario(folder, profile: str | None = None, model: dict | None = None):
    model = dict(model or TINY)
    if profile:
        model["profile"] = profile
    path = folder / "s.yaml"
    path.write_text(dump_yaml({
        "name": "tiny", "cluster": {"nodes": [{"gpu": "H100", "count": 1, "gpus_per_node": 1,
                                               "intra_node_bandwidth": "900 GB/s", "inter_node_bandwidth": "50 GB/s"}]},
        "model": model, "training": {"global_batch_size": 4, "precision": "bf16", "framework": "pytorch"}}))
    return path


def test_without_torch_profile_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)      # import torch raises ImportError
    assert main(["profile", str(write_scenario(tmp_path)), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'amp-tui[profile]'" in err


def test_bad_arguments_are_one_line(tmp_path, capsys):
    scenario = str(write_scenario(tmp_path))
    for argv, message in ((["profile", scenario, "--tp", "0"], "--tp"),
                          (["profile", scenario, "--micro-batch", "a,b"], "--micro-batch"),
                          (["profile", scenario, "--gpu", "H9000", "--device", "cpu"], "not a catalog GPU"),
                          (["profile", "no-such-thing"], "neither a file"),
                          (["profile", "llama3-8b", "--iterations", "--device", "cpu"], "needs a scenario")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err


def test_no_gpu_without_device_cpu_is_refused(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert main(["profile", str(write_scenario(tmp_path))]) == 2
    err = capsys.readouterr().err.strip()
    assert "no CUDA GPU" in err and "--device cpu" in err and "\n" not in err


def test_profile_then_plan_then_calibrate_on_the_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    scenario = write_scenario(tmp_path, profile="tiny.profile.yaml")   # names the profile it is about to get
    argv = ["profile", str(scenario), "--device", "cpu", "--tp", "1,2", "--micro-batch", "1,2",
            "--warmups", "0", "--repeats", "1", "--iterations"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "[ 12/12]" in captured.err and "left" in captured.err      # a bar per shape, the time left
    assert "(fp32 standing in for bf16, " in captured.err               # what it times, and for what
    profile = load_yaml_file(tmp_path / "tiny.profile.yaml")
    assert profile["device"] == "cpu" and profile["gpu"] == "any" and profile["complete"] is True
    assert profile["precision"] == "fp32" == profile["timing"]["dtype"].replace("float32", "fp32")   # not bf16
    assert re.search(r"CPU \((1 thread|\d+ threads)\)$", profile["device_name"])          # not '1 threads'
    assert [layer["name"] for layer in profile["layers"]] == ["embedding", "block", "lm_head"]
    block = profile["layers"][1]
    assert {(r["tp"], r["micro_batch"]) for r in block["measurements"]} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert all(r["forward_backward_s"] >= r["forward_s"] > 0 and r["recompute_s"] for r in block["measurements"])
    assert profile["optimizer"]["step_s_per_param"] > 0

    assert main(["plan", str(scenario), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "layer times from profile tiny.profile.yaml: measured on a CPU" in out
    # one source for every layer on the H100: the profile (a second would list its layers)
    assert re.search(r"^layer times: on H100 measured \(profile tiny\.profile\.yaml, [0-9-]+, a CPU standing in\)$", out, re.M)

    runs = tmp_path / "llama-tiny-cpu.iterations.yaml"
    entries = load_yaml_file(runs)
    assert {(e["micro_batch_size"], e["recompute"]) for e in entries} == {(1, "none"), (2, "none"),
                                                                           (1, "full"), (2, "full")}
    assert all(e["iteration_time_s"] > 0 for e in entries)
    assert main(["calibrate", str(scenario), str(runs), "--json"]) == 0


def test_ctrl_c_keeps_what_was_measured(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from amp_tui.profiling import measure

    real = measure.measure_shape
    calls = []

    def interrupted_after_two(*args, **kwargs):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "measure_shape", interrupted_after_two)
    out = tmp_path / "p.yaml"
    assert main(["profile", str(write_scenario(tmp_path)), "--device", "cpu", "--tp", "1", "--micro-batch", "1,2",
                 "--warmups", "0", "--repeats", "1", "-o", str(out)]) == 130
    profile = load_yaml_file(out)
    assert profile["complete"] is False and profile["rows"] == 2
    assert "incomplete" in capsys.readouterr().out


def test_hf_times_transformers_block(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "p.yaml"
    assert main(["profile", str(write_scenario(tmp_path)), "--device", "cpu", "--hf", "--tp", "1,2",
                 "--micro-batch", "1", "--warmups", "0", "--repeats", "1", "--no-optimizer", "-o", str(out)]) == 0
    profile = load_yaml_file(out)
    assert profile["implementation"] == "hf"
    block = next(layer for layer in profile["layers"] if layer["name"] == "block")
    assert {r["tp"] for r in block["measurements"]} == {1, 2}       # Llama's block shards by heads


def test_the_time_left_is_each_layers_own_rate_and_none_before_every_layer_is_timed():
    """Issue 34: the estimate took the whole run's rate so far, set by the layers timed first: on
    the CPU an embedding (a dense gradient of the whole vocabulary, little FLOPs) said '~14 h left'
    for a 6-minute run, '~1396 s left' for a 69 s one."""
    from types import SimpleNamespace

    from amp_tui.profiling.measure import time_left

    def shape(index, rate_work):
        return SimpleNamespace(index=index, work=lambda tp, m, w=rate_work: w * m / tp)

    embedding, block = shape(0, 1.0), shape(1, 100.0)
    spent = {0: (3.0, 1.0)}                          # 3 s for 1 unit of the embedding's work
    assert time_left(spent, [(embedding, 1, 2), (block, 1, 1)]) is None      # the block not yet timed
    spent[1] = (2.0, 100.0)                          # 2 s for 100 units of a block's
    assert time_left(spent, [(embedding, 1, 2), (block, 1, 2)]) == pytest.approx(3.0 * 2 + 2.0 * 2)
    assert time_left(spent, []) == 0.0
