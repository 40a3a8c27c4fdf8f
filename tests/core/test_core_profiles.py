"""Profile files (`amp-tui profile`, core/spec/profiles.py) and the cost model's measured-time path
(core/costmodel/measured.py): the file round-trips, every bad file is one line (exit 2 on the
command line), and a measured layer is priced from its measurement, checked by hand on a small
model. No torch needed: the profiles here are written by the test."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from amp_tui.cli import main
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_text
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.profiles import Profile, ProfiledLayer, ProfileRow, parse_profile
from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.core.spec.strategy import Strategy

TINY = {"family": "gpt", "name": "gpt-tiny", "hidden_size": 64, "num_layers": 3, "num_heads": 4,
        "sequence_length": 16, "vocab_size": 128}
BLOCK_F = {1: 1.0e-3, 2: 1.5e-3, 4: 2.5e-3}      # forward seconds per micro-batch, tp 1
BLOCK_FB = {1: 3.0e-3, 2: 4.0e-3, 4: 7.0e-3}     # forward + backward
BLOCK_RECOMPUTE = {1: 4.5e-3, 2: 6.0e-3, 4: 10.0e-3}


def scenario_dict(model: dict | None = None, profile=None, gpu: str = "H100", precision: str = "bf16") -> dict:
    model = dict(model or TINY)
    if profile is not None:
        model["profile"] = profile
    return {"name": "tiny", "cluster": {"nodes": [{"gpu": gpu, "count": 1, "gpus_per_node": 2,
                                                   "intra_node_bandwidth": "900 GB/s",
                                                   "inter_node_bandwidth": "50 GB/s"}]},
            "model": model, "training": {"global_batch_size": 8, "precision": precision, "framework": "pytorch"}}


def tiny_profile(gpu: str = "H100", device: str = "cuda", model: dict | None = None, **changes) -> Profile:
    plain = parse_scenario(scenario_dict(model))
    block = next(g for g in plain.model.groups if g.kind == "block")
    rows = tuple(ProfileRow(tp=1, micro_batch=m, forward_s=BLOCK_F[m], forward_backward_s=BLOCK_FB[m],
                            recompute_s=BLOCK_RECOMPUTE[m], peak_memory_bytes=1e6 * m) for m in (1, 2, 4))
    rows += (ProfileRow(tp=2, micro_batch=1, forward_s=0.6e-3, forward_backward_s=1.8e-3),)
    fields = dict(model=plain.model.name, precision="bf16", gpu=gpu, device=device,
                  sequence_length=plain.model.sequence_length, device_name="NVIDIA H100 80GB HBM3",
                  software=(("torch", "2.11.0"),), implementation="plain", measured_at="2026-11-27T10:00:00+00:00",
                  timing=(("clock", "cuda-events"),), complete=True,
                  layers=(ProfiledLayer("block", "block", block.params, block.flops, rows),),
                  optimizer_step_s_per_param=2e-11, optimizer_name="adam")
    fields.update(changes)
    return Profile(**fields)


def test_a_profile_round_trips_through_its_file():
    profile = tiny_profile()
    text = profile.to_yaml()
    again = parse_profile(load_yaml_text(text), source="inline")
    assert again == profile
    assert again.to_yaml() == text
    # Inline in a scenario, and through the scenario's own to_dict (a saved plan keeps it).
    scenario = parse_scenario(scenario_dict(profile=profile.to_dict()))
    assert scenario.model.measured_profile == profile
    assert parse_scenario(scenario.to_dict()).model == scenario.model


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.8, 0.95])
def test_a_truncated_file_is_one_line_and_exit_2(tmp_path, capsys, cut):
    text = tiny_profile().to_yaml()
    (tmp_path / "p.yaml").write_text(text[:int(len(text) * cut)])
    (tmp_path / "s.yaml").write_text(dump_yaml(scenario_dict(profile="p.yaml")))
    assert main(["plan", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("amp-tui: error: ") and "\n" not in err and "profile" in err


def test_a_file_cut_inside_its_header_says_so_without_a_type_name(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text(tiny_profile().to_yaml().split("\n", 1)[0] + "\n")   # the comment only
    (tmp_path / "s.yaml").write_text(dump_yaml(scenario_dict(profile="p.yaml")))
    assert main(["plan", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cut short" in err and "NoneType" not in err, err


def test_a_file_missing_measured_rows_is_refused_by_its_row_count():
    data = tiny_profile().to_dict()
    data["layers"][0]["measurements"].pop()          # cut at a row boundary: still valid YAML
    with pytest.raises(SpecError, match="cut short"):
        parse_profile(data, source="p.yaml")


def test_a_profile_of_another_model_or_gpu_or_precision_is_refused(tmp_path, capsys):
    other = {**TINY, "name": "gpt-wide", "hidden_size": 128}
    cases = [
        (scenario_dict(model=other, profile=tiny_profile().to_dict()), "measured for model 'gpt-tiny'"),
        (scenario_dict(profile=tiny_profile(gpu="H200").to_dict()), "measured on H200"),
        (scenario_dict(profile=tiny_profile().to_dict(), precision="fp16"), "measured in bf16"),
        (scenario_dict(profile=tiny_profile(sequence_length=8).to_dict()), "measured at 8 tokens"),
    ]
    for i, (data, message) in enumerate(cases):
        with pytest.raises(SpecError, match=message):
            parse_scenario(data)
        (tmp_path / f"s{i}.yaml").write_text(dump_yaml(data))
        assert main(["plan", str(tmp_path / f"s{i}.yaml")]) == 2
        assert message in capsys.readouterr().err


def test_a_cpu_profile_says_so_and_stands_in_for_any_gpu():
    profile = tiny_profile(gpu="any", device="cpu", device_name="x86_64 CPU (2 threads)")
    scenario = parse_scenario(scenario_dict(profile=profile.to_dict(), gpu="A100-80GB", precision="fp16"))
    assert "a CPU" in profile.summary() and "not a GPU's times" in profile.summary()
    assert scenario.model.measured_layer_names("A100-80GB", from_file=True) == ["block x3"]


def test_stale_profiles_are_flagged():
    old = tiny_profile(measured_at="2020-01-01T00:00:00+00:00")
    assert old.is_stale() and "stale" in old.summary()
    assert not tiny_profile(measured_at="2099-01-01T00:00:00+00:00").is_stale()


def test_measured_times_replace_the_analytic_ones_by_hand():
    """A block's compute per micro-batch is its measured forward + backward; between measured
    sizes linear; under full recomputation the checkpointed time; unmeasured layers keep the
    analytic time; a measured shard at tp 2 keeps its all-reduce bytes (not in the measurement)."""
    plain = CostModel(parse_scenario(scenario_dict()))
    profiled = CostModel(parse_scenario(scenario_dict(profile=tiny_profile().to_dict())))
    blocks = [i for i, layer in enumerate(profiled.model.layers) if layer.kind == "block"]
    others = [i for i, layer in enumerate(profiled.model.layers) if layer.kind != "block"]
    for m in (1, 2, 4):
        compute, tp_bytes = profiled.layer_times(0, 1, m)
        assert compute[blocks] == pytest.approx([BLOCK_FB[m]] * 3)
        assert compute[others] == pytest.approx(plain.layer_times(0, 1, m)[0][others])
        assert (profiled.host_times("H100", 1)[blocks] == 0).all()      # a measurement holds its host time
    interpolated = 0.5 * (BLOCK_FB[2] + BLOCK_FB[4])     # micro-batch 3: halfway between 2 and 4
    assert profiled.layer_times(0, 1, 3)[0][blocks] == pytest.approx([interpolated] * 3)
    compute2, bytes2 = profiled.layer_times(0, 2, 1)
    assert compute2[blocks] == pytest.approx([1.8e-3] * 3)
    assert (bytes2[blocks] > 0).all() and bytes2[blocks] == pytest.approx(plain.layer_times(0, 2, 1)[1][blocks])
    recompute = CostModel(parse_scenario({**scenario_dict(profile=tiny_profile().to_dict()),
                                          "training": {"global_batch_size": 8, "precision": "bf16",
                                                       "framework": "pytorch", "recompute": "full"}}))
    assert recompute.layer_times(0, 1, 2)[0][blocks] == pytest.approx([BLOCK_RECOMPUTE[2]] * 3)


def test_extrapolation_costs_at_least_the_analytic_increment():
    profiled = CostModel(parse_scenario(scenario_dict(profile=tiny_profile().to_dict())))
    block = next(i for i, layer in enumerate(profiled.model.layers) if layer.kind == "block")
    at4, at8 = profiled.layer_times(0, 1, 4)[0][block], profiled.layer_times(0, 1, 8)[0][block]
    slope = (BLOCK_FB[4] - BLOCK_FB[2]) / 2
    assert at8 >= at4 + 4 * slope - 1e-12
    assert not math.isnan(at8)


def test_the_measured_optimizer_step_replaces_the_bandwidth_estimate():
    strategy = Strategy(1, 1, 2, 1)
    plain = evaluate(parse_scenario(scenario_dict()), strategy)
    profiled_scenario = parse_scenario(scenario_dict(profile=tiny_profile().to_dict()))
    profiled = evaluate(profiled_scenario, strategy)
    params = profiled_scenario.model.total_params
    assert profiled.stages[0].optimizer_step_s == pytest.approx(2e-11 * params)
    assert plain.stages[0].optimizer_step_s != pytest.approx(profiled.stages[0].optimizer_step_s)


def test_plan_and_evaluate_say_which_layers_were_measured(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text(tiny_profile().to_yaml())
    (tmp_path / "s.yaml").write_text(dump_yaml(scenario_dict(profile="p.yaml")))   # relative to the scenario
    assert main(["plan", str(tmp_path / "s.yaml"), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "layer times from profile p.yaml: measured on H100" in out
    assert "on H100 measured (profile p.yaml, 2026-11-27, H100) block x3; analytic embedding, lm_head" in out
    (tmp_path / "st.yaml").write_text("- {tp: 1, pp: 1, dp: 2, micro_batch_size: 1}\n")
    assert main(["evaluate", str(tmp_path / "s.yaml"), str(tmp_path / "st.yaml"), "--json"]) == 0
    sources = json.loads(capsys.readouterr().out)[0]["layer_times"]
    assert sources["measured"] == {"H100": ["block x3"]}
    assert sources["analytic"] == {"H100": ["embedding", "lm_head"]}
    assert sources["profile"]["gpu"] == "H100" and sources["profile"]["stale"] is False


def test_the_h200_run_in_tests_data_parses_and_prices_its_models():
    """The profile files measured on an H200 (docs/profiling.md) apply to their models."""
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "data" / "profiling"
    for name, model in (("gpt2-medium", {"preset": "gpt2-medium"}),
                        ("llama3-8b-4layers", {"preset": "llama3-8b", "num_layers": 4, "sequence_length": 4096})):
        scenario = parse_scenario({**scenario_dict(model=model, profile=str(data / f"{name}.profile.yaml"),
                                                   gpu="H200")})
        assert scenario.model.measured_profile.device == "cuda"
        cost = CostModel(scenario)
        compute, _ = cost.layer_times(0, 1, 1)
        assert np.isfinite(compute).all() and compute.sum() > 0
