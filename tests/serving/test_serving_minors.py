"""Issue 34's serving minors: serve and the dashboard's `v` agree on training scenarios; a latency bound
nothing meets names the flag given; the Serve view's header; decode beside the max flow is explained."""

import json

import pytest

from amp_tui.cli import main
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.serving.spec import (defaults_note, load_serving_scenario, parse_serving_scenario,
                                  serving_scenario_from, with_group_count)


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_serve_serves_a_training_scenario_as_the_dashboard_does_and_says_so(capsys):
    code, out, err = _run(capsys, "serve", "paper-homogeneous", "--json", "--time-limit", "3")
    assert code == 0
    assert json.loads(out)["predicted"]["decode_tokens_per_s"] > 0
    assert "no serving section" in err and "750 prompt + 240 output tokens" in err
    assert "datasheet" in err        # g4dn's T4s have no serving profile
    cli = load_serving_scenario("paper-homogeneous")
    dashboard = serving_scenario_from(load_scenario("paper-homogeneous"))
    assert cli.serving == dashboard.serving and cli.serving_defaults and dashboard.serving_defaults
    assert [(g.label, g.count) for g in cli.groups] == [(g.label, g.count) for g in dashboard.groups]
    # a live edit in the Serve view keeps saying it
    assert defaults_note(with_group_count(cli, 0, 3)) is not None


def test_a_serving_scenario_carries_no_defaults_note():
    assert defaults_note(load_serving_scenario("helix-single24-llama2-70b")) is None


def test_a_scenario_with_neither_section_is_refused_in_one_line(capsys, tmp_path):
    data = load_serving_scenario("helix-single24-llama2-70b").to_dict()
    del data["serving"]
    path = tmp_path / "bare.yaml"
    path.write_text(json.dumps(data))
    code, _, err = _run(capsys, "serve", str(path))
    assert code == 2 and "serving" in err and "neither a serving nor a training" in err
    assert len(err.strip().splitlines()) == 1


def test_defaults_round_trip_through_a_saved_scenario():
    scenario = load_serving_scenario("paper-homogeneous")
    again = parse_serving_scenario(scenario.to_dict())
    assert again.serving_defaults and again.serving == scenario.serving


def test_decode_far_below_the_max_flow_comes_with_a_sentence_that_adds_up(capsys):
    import re

    from amp_tui.serving.result import run_serve

    result = run_serve(load_serving_scenario("paper-homogeneous"), time_limit_s=3)
    p = result.served.prediction
    assert p.decode_tokens_per_s < 0.2 * result.solution.throughput     # the gap the minor saw
    sentence = result.gap_sentence()
    why = "the KV cache admits no more" if p.limited_by == "kv cache" else f"{p.limited_by} is saturated"
    assert why in sentence and "no limit on requests in flight" in sentence
    assert "links carry at most 0.0%" in sentence
    # its arithmetic is the closed loop: N x o / (TTFT + o x TPOT) = decode
    n, o, ttft, tpot = (float(v.replace(",", "")) for v in re.search(
        r"= ([\d,]+) requests in flight .* x (\d+) tokens each / \(([\d.]+) s to the first \+ \d+ x ([\d.]+) s",
        sentence).groups())
    assert n * o / (ttft + o * tpot) == pytest.approx(p.decode_tokens_per_s, rel=0.02)
    code, out, _ = _run(capsys, "serve", "paper-homogeneous", "--time-limit", "3")
    assert code == 0 and "no limit on requests in flight" in out


def test_a_latency_bound_nothing_meets_names_the_flag_given_and_the_lowest_found(capsys):
    code, _, err = _run(capsys, "serve", "helix-single24-llama2-70b", "--max-tpot", "0.01", "--time-limit", "60")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--max-tpot: 0.01: no placement found with a predicted TPOT under 0.01 s" in err
    assert "None" not in err and "--max-ttft" not in err
    lowest = float(err.split("evaluated: ")[1].split(" s)")[0])
    assert lowest > 0.01
