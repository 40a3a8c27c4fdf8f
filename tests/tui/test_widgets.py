"""Rendering of the result widgets from a Prediction (no app needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from amp_tui.core.search.search import search
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.tui.edits import set_layer_field
from amp_tui.tui.screens.save_dialog import default_plan_name
from amp_tui.tui.widgets.stage_bars import stage_lines
from amp_tui.tui.widgets.time_chart import PARTS, build_chart, stage_breakdown


@pytest.fixture(scope="module")
def result():
    return search(load_scenario("paper-het-cluster"))


def test_stage_bars_one_row_per_stage_and_bottleneck_marked(result):
    prediction = result.strategies[0]
    text = stage_lines(prediction, 70).plain
    lines = text.splitlines()
    assert len(lines) == len(prediction.stages) + 2  # header, stages, legend
    assert lines[1 + prediction.bottleneck_stage].count("◀") == 1
    assert "OVER" not in text


def test_stage_bars_mark_memory_over_capacity(result):
    prediction = result.strategies[0]
    stage = prediction.stages[0]
    over = replace(stage, capacity_bytes=stage.memory.total_bytes / 2)
    text = stage_lines(replace(prediction, stages=(over, *prediction.stages[1:])), 70).plain
    assert "OVER by" in text.splitlines()[1]


def test_time_breakdown_sums_to_the_iteration_time(result):
    prediction = result.strategies[0]
    rows = stage_breakdown(prediction)
    assert len(rows) == len(PARTS)
    for stage in range(len(prediction.stages)):
        assert sum(row[stage] for row in rows) == pytest.approx(prediction.iteration_time_s)
    chart = build_chart(prediction, 60, 12)
    assert "\x1b[38;2" not in chart  # no true colour escapes


def test_default_plan_name_is_safe():
    assert default_plan_name("my cluster/[x]", "1x4x4") == "my-cluster--x-1x4x4.plan.yaml"


def test_repeat_change_resizes_per_copy_profiles():
    scenario = load_scenario("paper-homogeneous")
    group = next(i for i, layer in enumerate(scenario.model.groups) if layer.repeat > 1)
    shorter = set_layer_field(scenario, group, "repeat", "12")
    assert shorter.model.groups[group].repeat == 12
    longer = set_layer_field(scenario, group, "repeat", "30")
    assert longer.model.groups[group].repeat == 30
