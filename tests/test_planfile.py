"""Plan files: save, load, round trip through evaluate, and refusal of damaged or foreign files."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_tui import __version__
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_file, load_yaml_text
from amp_tui.core.plans.planfile import PLAN_FORMAT, Plan, is_plan, load_plan, plan_dict, prediction_changes, save_plan
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.spec.presets import load_preset, preset_names
from amp_tui.core.spec.scenario import load_scenario

SCENARIOS = [name for name in preset_names("scenarios")
             if not name.startswith("bench-") and "training" in load_preset("scenarios", name)]


@pytest.fixture(scope="module")
def top():
    """name -> (scenario, its best prediction), each scenario searched once per module."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            scenario = load_scenario(name)
            cache[name] = (scenario, search(scenario).strategies[0])
        return cache[name]

    return get


@pytest.fixture(scope="module")
def saved(top, tmp_path_factory):
    """A saved plan of the paper's heterogeneous-cluster scenario: (path, scenario, prediction, text)."""
    scenario, prediction = top("paper-het-cluster")
    path = save_plan(tmp_path_factory.mktemp("plan") / "plan.yaml", scenario, prediction)
    return path, scenario, prediction, path.read_text()


def test_presets_are_covered():
    assert {"paper-homogeneous", "paper-het-cluster", "paper-het-model"} <= set(SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_round_trip_gives_the_same_figures(name, top, tmp_path):
    scenario, prediction = top(name)
    path = save_plan(tmp_path / f"{name}.yaml", scenario, prediction)
    plan = load_plan(path)
    assert plan.scenario == scenario
    assert plan.strategy == prediction.strategy
    assert plan.strategy.partition is not None and plan.strategy.placement is not None
    fresh = evaluate(plan.scenario, plan.strategy)
    assert prediction_changes(plan.saved_prediction, fresh) == []
    assert fresh.iteration_time_s == prediction.iteration_time_s
    assert plan.saved_prediction["iteration_time_s"] == prediction.iteration_time_s


def test_plan_file_fields(saved):
    path, scenario, prediction, text = saved
    data = load_yaml_file(path)
    assert list(data) == ["format", "amp_tui_version", "created", "scenario", "strategy", "prediction", "end"]
    assert data["end"] == PLAN_FORMAT and text.endswith(f"end: {PLAN_FORMAT}\n")
    assert data["format"] == PLAN_FORMAT
    assert data["amp_tui_version"] == __version__
    created = datetime.fromisoformat(data["created"])
    assert created.utcoffset() == timedelta(0)
    assert abs(datetime.now(timezone.utc) - created) < timedelta(hours=1)
    assert data["scenario"] == scenario.to_dict()
    assert data["strategy"] == prediction.strategy.to_dict()
    # the training techniques are part of the strategy (issue 11)
    assert set(data["strategy"]) == {"tp", "pp", "dp", "micro_batch_size", "partition", "placement",
                                     "recompute", "zero_stage", "sequence_parallel", "cp", "virtual_stages"}
    assert data["prediction"]["num_micro_batches"] == prediction.num_micro_batches
    assert len(data["prediction"]["stages"]) == prediction.strategy.pp
    assert text.startswith("# amp-tui plan for paper-het-cluster")


def test_loaded_plan_records_version_and_time(saved):
    path, *_ = saved
    plan = load_plan(path)
    assert plan.version == __version__
    assert plan.created == load_yaml_file(path)["created"]


def test_plan_is_frozen(saved):
    plan = load_plan(saved[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.strategy = None


def test_plan_dict_refuses_a_strategy_for_another_scenario(top):
    scenario, _ = top("paper-homogeneous")
    _, other = top("mixed-h100-a100-llama3-8b")   # 32 GPUs, not 16
    with pytest.raises(SpecError, match="GPU count"):
        plan_dict(scenario, other)


# -- saving: never clobber, never leave temp files ------------------------------------------------

def test_save_refuses_to_overwrite_and_keeps_the_original(top, tmp_path):
    scenario, prediction = top("paper-homogeneous")
    path = save_plan(tmp_path / "plan.yaml", scenario, prediction)
    original = path.read_bytes()
    other_scenario, other = top("paper-het-model")
    with pytest.raises(SpecError, match="already exists"):
        save_plan(path, other_scenario, other)
    assert path.read_bytes() == original
    save_plan(path, other_scenario, other, overwrite=True)
    assert load_plan(path).scenario.name == "paper-het-model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]


def test_atomic_write_leaves_no_temp_files(top, tmp_path):
    scenario, prediction = top("paper-homogeneous")
    for name in ("a.yaml", "b.yaml"):
        save_plan(tmp_path / name, scenario, prediction)
    save_plan(tmp_path / "a.yaml", scenario, prediction, overwrite=True)
    with pytest.raises(SpecError):
        save_plan(tmp_path / "b.yaml", scenario, prediction)
    with pytest.raises(SpecError, match="does not exist"):
        save_plan(tmp_path / "missing" / "c.yaml", scenario, prediction)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]


# -- damaged and foreign files ----------------------------------------------------------------------

def _load_error(tmp_path, text: str, name: str = "bad.yaml") -> SpecError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_plan(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return info.value


def _edited(text: str, edit) -> str:
    """The plan text with `edit` applied to its parsed mapping."""
    data = load_yaml_text(text)
    edit(data)
    return dump_yaml(data)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_plan(tmp_path / "nope.yaml")


def test_truncated_file(saved, tmp_path):
    text = saved[3]
    error = _load_error(tmp_path, text[: len(text) // 2])
    assert error.field.endswith(("strategy", "prediction")) or "malformed" in error.reason


def test_binary_file(tmp_path):
    path = tmp_path / "image.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(SpecError) as info:
        load_plan(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_malformed_yaml(tmp_path):
    error = _load_error(tmp_path, "format: amp-tui/plan/1\nscenario: [unclosed\n")
    assert "malformed YAML" in error.reason


def test_not_a_mapping(tmp_path):
    error = _load_error(tmp_path, "- just\n- a list\n")
    assert "not an amp-tui plan" in error.reason


def test_foreign_mapping(tmp_path):
    error = _load_error(tmp_path, "services:\n  web:\n    image: nginx\n")
    assert error.field.endswith("format")
    assert "not an amp-tui plan" in error.reason


def test_scenario_file_is_not_a_plan(tmp_path):
    error = _load_error(tmp_path, dump_yaml(load_preset("scenarios", "paper-homogeneous")))
    assert "scenario file" in error.reason


@pytest.mark.parametrize("fmt, reason", [
    ("amp-tui/plan/2", "unsupported plan format version"),
    ("amp-tui/scenario/1", "not an amp-tui plan format"),
    (7, "not an amp-tui plan format"),
])
def test_wrong_format(saved, tmp_path, fmt, reason):
    error = _load_error(tmp_path, _edited(saved[3], lambda d: d.update(format=fmt)))
    assert error.field.endswith("format") and reason in error.reason


def test_partition_that_no_longer_sums(saved, tmp_path):
    def edit(data):
        data["strategy"]["partition"][0] += 1
    error = _load_error(tmp_path, _edited(saved[3], edit))
    assert error.field.endswith("strategy.partition") and "sums to" in error.reason


def test_partition_and_placement_are_required(saved, tmp_path):
    for key in ("partition", "placement"):
        error = _load_error(tmp_path, _edited(saved[3], lambda d: d["strategy"].pop(key)), f"{key}.yaml")
        assert error.field.endswith(f"strategy.{key}") and "required" in error.reason


def test_bad_placement(saved, tmp_path):
    error = _load_error(tmp_path, _edited(saved[3], lambda d: d["strategy"].update(placement=[0, 0])))
    assert error.field.endswith("strategy.placement")


def test_strategy_invalid_for_its_scenario(saved, tmp_path):
    error = _load_error(tmp_path, _edited(saved[3], lambda d: d["strategy"].update(dp=3)))
    assert "strategy.tp*pp*dp" in error.field


def test_bad_scenario_names_the_scenario_field(saved, tmp_path):
    error = _load_error(tmp_path, _edited(saved[3], lambda d: d["scenario"]["cluster"]["nodes"][0].update(gpu="Z9")))
    assert error.field.endswith("scenario.cluster.nodes[0].gpu")


def test_unknown_field(saved, tmp_path):
    error = _load_error(tmp_path, _edited(saved[3], lambda d: d.update(notes="hi")))
    assert error.field.endswith("notes") and "unknown plan field" in error.reason


def test_missing_prediction_figure(saved, tmp_path):
    error = _load_error(tmp_path, _edited(saved[3], lambda d: d["prediction"].pop("iteration_time_s")))
    assert error.field.endswith("prediction.iteration_time_s")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_any_cut_before_the_prediction_is_refused(saved, tmp_path, fraction):
    text = saved[3]
    end = text.index("\nprediction:")
    path = tmp_path / "cut.yaml"
    path.write_text(text[: int(fraction * end)])
    with pytest.raises(SpecError):
        load_plan(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(min_value=0.0, max_value=1.0))
def test_a_cut_inside_the_prediction_never_changes_the_strategy(saved, tmp_path, fraction):
    path, scenario, prediction, text = saved
    start = text.index("\nprediction:")
    cut = tmp_path / "cut.yaml"
    cut.write_text(text[: start + int(fraction * (len(text) - start))])
    try:
        plan = load_plan(cut)
    except SpecError:
        return
    assert plan.scenario == scenario and plan.strategy == prediction.strategy


# -- is_plan and prediction_changes -------------------------------------------------------------------

def test_is_plan(top):
    scenario, prediction = top("paper-homogeneous")
    assert is_plan(plan_dict(scenario, prediction))
    assert is_plan({"format": "amp-tui/plan/9"})   # a newer plan: load_plan names the version
    for other in (scenario.to_dict(), load_preset("scenarios", "paper-homogeneous"), [], None, "x",
                  {"format": "something/else"}, {"format": 1}):
        assert not is_plan(other)


def test_prediction_changes_reports_moved_figures(top):
    scenario, prediction = top("paper-homogeneous")
    saved = plan_dict(scenario, prediction)["prediction"]
    assert prediction_changes(saved, prediction) == []
    slower = dict(saved, iteration_time_s=saved["iteration_time_s"] * 0.5, fits_memory=not saved["fits_memory"])
    lines = prediction_changes(slower, prediction)
    assert len(lines) == 2
    assert lines[0].startswith("iteration_time_s: ") and " -> " in lines[0] and "(+100.0%)" in lines[0]
    assert lines[1] == f"fits_memory: {'no' if saved['fits_memory'] else 'yes'} -> {'yes' if saved['fits_memory'] else 'no'}"


def test_prediction_changes_tolerance_and_missing_figures(top):
    scenario, prediction = top("paper-homogeneous")
    saved = plan_dict(scenario, prediction)["prediction"]
    tiny = dict(saved, iteration_time_s=saved["iteration_time_s"] * (1 + 1e-12))
    assert prediction_changes(tiny, prediction) == []
    assert prediction_changes(tiny, prediction, rel_tol=1e-14) != []
    close = dict(saved, iteration_time_s=saved["iteration_time_s"] * (1 + 1e-7))
    (line,) = prediction_changes(close, prediction)
    old, new = line.split(": ")[1].split(" (")[0].split(" -> ")
    assert old != new   # shown with enough digits to tell them apart
    missing = {k: v for k, v in saved.items() if k != "samples_per_s"}
    assert prediction_changes(missing, prediction) == [
        f"samples_per_s: (not saved) -> {prediction.samples_per_s:.4g}"]


def test_plan_round_trip_with_a_changed_model_reports_changes(saved, tmp_path):
    """A plan evaluated after its scenario changed says what moved (the CLI's `evaluate PLAN`)."""
    path, scenario, prediction, text = saved
    plan = load_plan(path)
    bigger = dataclasses.replace(plan, scenario=plan.scenario.with_training(global_batch_size=64))
    fresh = evaluate(bigger.scenario, bigger.strategy)
    lines = prediction_changes(plan.saved_prediction, fresh)
    per_step = plan.strategy.dp * plan.strategy.micro_batch_size
    assert any(line.startswith(f"num_micro_batches: {32 // per_step} -> {64 // per_step}") for line in lines)
    assert any(line.startswith("iteration_time_s: ") for line in lines)
    assert isinstance(bigger, Plan)
