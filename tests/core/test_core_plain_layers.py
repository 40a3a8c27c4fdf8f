"""A scenario written to the planning-core contract: explicit layers with params, flops,
activation_bytes, output_bytes, tp_comm_bytes and profile only, no model-level shape. The planner
infers the tokens and width the efficiency model needs, and ranks as it does from the preset."""

import pytest

from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy
from amp_tui.core.validation.replay import run_validation
from amp_tui.core.validation.runs import AMP_SCENARIO, load_runs, parse_run, source_key

CONTRACT = ("params", "flops", "activation_bytes", "output_bytes", "tp_comm_bytes", "profile")


def plain(preset: str):
    data = load_scenario(preset).to_dict()
    layers = [{**{k: layer[k] for k in CONTRACT if k in layer}, **({"repeat": layer["repeat"]} if "repeat" in layer else {})}
              for layer in data["model"]["layers"]]
    return parse_scenario({**data, "model": {"layers": layers}})


def test_the_repeated_layer_gives_the_sequence_length_and_width():
    scenario = plain("paper-homogeneous")
    model = scenario.model
    assert model.sequence_length == 1024                        # 2 MiB of fp16 output over 1,024 wide
    assert set(model.columns["width"]) == {1024.0} and set(model.columns["tokens"]) == {1024.0}
    assert [layer.kind for layer in model.groups].count("block") == 1 and model.groups[2].kind == "block"


@pytest.mark.parametrize("strategy", [Strategy(2, 2, 4, 8), Strategy(4, 1, 4, 1), Strategy(1, 4, 4, 1), Strategy(2, 8, 1, 16)])
def test_plain_layers_predict_like_the_preset(strategy):
    """Only the per-layer fields the contract leaves out differ (replicated activations): within 3%.
    Before the shape was inferred, 2x2x4 at micro-batch 8 came out 2.3x too fast."""
    preset, contract = load_scenario("paper-homogeneous"), plain("paper-homogeneous")
    assert evaluate(contract, strategy).iteration_time_s == pytest.approx(evaluate(preset, strategy).iteration_time_s, rel=0.03)


@pytest.mark.parametrize("name", ["paper-homogeneous", "paper-het-cluster", "paper-het-model"])
def test_plain_layers_pick_the_presets_best_strategy(name):
    preset, contract = search(load_scenario(name), top=1), search(plain(name), top=1)
    best, found = preset.strategies[0], contract.strategies[0]
    assert (found.strategy.tp, found.strategy.pp, found.strategy.dp, found.strategy.micro_batch_size) == \
        (best.strategy.tp, best.strategy.pp, best.strategy.dp, best.strategy.micro_batch_size)
    assert found.iteration_time_s == pytest.approx(best.iteration_time_s, rel=0.02)


def test_the_loss_gets_the_presets_workspace():
    """The last layer outputs one fp32 value per token: a loss over its input's logits."""
    preset, contract = load_scenario("paper-homogeneous").model, plain("paper-homogeneous").model
    assert contract.groups[-1].workspace_bytes == preset.groups[-1].workspace_bytes > 0
    assert sum(layer.workspace_bytes for layer in contract.groups) == contract.groups[-1].workspace_bytes


def test_an_output_projection_with_its_loss_gets_the_workspace_from_its_weights():
    layers = [{"params": 12 * 64 * 64 + 13 * 64, "flops": 1e9, "activation_bytes": 1e6, "output_bytes": 2 * 128 * 64,
               "repeat": 4},
              {"params": 64 * 1000, "flops": 1e9, "activation_bytes": 1e6, "output_bytes": 4 * 128}]
    scenario = parse_scenario({"cluster": {"preset": "4x-g4dn.12xlarge"}, "model": {"layers": layers},
                               "training": {"global_batch_size": 8}})
    assert scenario.model.groups[-1].workspace_bytes == 12 * 128 * 1000
    stated = [layers[0], {**layers[1], "workspace_bytes": 5}]
    kept = parse_scenario({"cluster": {"preset": "4x-g4dn.12xlarge"}, "model": {"layers": stated},
                           "training": {"global_batch_size": 8}})
    assert kept.model.groups[-1].workspace_bytes == 5


def test_plain_layers_predict_amps_out_of_memory_runs():
    """Replayed from the plain file, AMP's runs that ran out of memory are predicted not to fit
    (all but the one the preset also predicts to fit) and every run that ran fits. Before the loss
    workspace was inferred, all five were predicted to fit."""
    scenarios = {AMP_SCENARIO: plain(AMP_SCENARIO)}
    cases = [parse_run(run, scenarios) for run in load_runs() if source_key(run) == "amp-homogeneous"]
    replayed = run_validation(cases=cases).replayed
    oom = [r for r in replayed if r.case.measured.out_of_memory]
    assert len(oom) == 5 and sum(r.predicted_fits for r in oom) <= 1
    assert all(r.predicted_fits for r in replayed if not r.case.measured.out_of_memory)


def test_layers_without_a_repeated_one_keep_their_own_shapes():
    layers = [{"params": 1e6 * (i + 1), "flops": 1e9, "activation_bytes": 1e6, "output_bytes": 1e6} for i in range(4)]
    scenario = parse_scenario({"cluster": {"preset": "4x-g4dn.12xlarge"}, "model": {"layers": layers},
                               "training": {"global_batch_size": 8}})
    assert scenario.model.sequence_length == 1 and set(scenario.model.columns["tokens"]) == {0.0}
