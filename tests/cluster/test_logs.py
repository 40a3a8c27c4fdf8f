"""`calibrate PLAN LOG`: the engines' own training logs (fixtures in tests/data/cluster, each in its
engine's format) calibrate the plan's strategy to within the log's spread; a log of another run,
one without iteration lines or one cut short is refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from amp_tui.cli import main
from amp_tui.core.calibration.log_runs import measure_log
from amp_tui.core.calibration.logs import parse_log, read_log
from amp_tui.core.plans.planfile import open_scenario
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import load_scenario

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster"
PLAN = str(DATA / "plan-a100-tp2-dp8.yaml")


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("amp-tui: error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("log", ["megatron.log", "torchtitan.log", "deepspeed.log"])
def test_a_log_moves_the_plans_prediction_to_within_its_spread(tmp_path, capsys, log):
    out = tmp_path / "calibrated.yaml"
    assert main(["calibrate", PLAN, str(DATA / log), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    measured, spread = report["log"]["iteration_time_s"], report["log"]["spread_log_sd"]
    assert report["log"]["dropped"] >= 1 and len(report["log"]["iterations_kept"]) >= 5
    scenario, plan = open_scenario(PLAN)
    before = evaluate(scenario, plan.strategy).iteration_time_s
    after = evaluate(load_scenario(str(out)), plan.strategy).iteration_time_s
    assert abs(math.log(before / measured)) > 3 * spread          # it had somewhere to move
    assert abs(math.log(after / measured)) <= spread              # and it moved to within the log's spread
    calibration = load_scenario(str(out)).calibration
    assert calibration.residual_log_sd >= spread * 0.999 and log in calibration.source


def test_the_text_report_says_what_was_read_dropped_and_fitted(capsys):
    assert main(["calibrate", PLAN, str(DATA / "megatron.log")]) == 0
    out = capsys.readouterr().out
    assert "read megatron.log (Megatron-LM): 11 iteration lines up to iteration 100; 1 dropped as warm-up, 10 kept" in out
    assert "peak memory 52.1 GiB (max reserved of the 2 ranks that report it)" in out
    assert "2x1x8 micro-batch 16: measured 12.5 s, predicted 10.8 s before" in out     # 10.2 s before issue 35
    assert "not written: give -o CALIBRATED.yaml" in out


def test_each_engine_reads_its_own_lines():
    megatron, titan = read_log(DATA / "megatron.log"), read_log(DATA / "torchtitan.log")
    assert (megatron.engine, megatron.stated["world_size"], megatron.stated["tp"]) == ("megatron", 16, 2)
    assert [r.step for r in megatron.records][:3] == [1, 10, 20] and megatron.records[1].seconds == pytest.approx(12.4766)
    assert megatron.peak_memory_bytes == 53390.0 * 2**20            # the fullest rank's max reserved
    assert (titan.engine, titan.stated["tokens_per_step"], titan.stated["world_size"]) == ("torchtitan", 524288, 16)
    assert titan.records[1].tokens_per_s == 2358.0                  # colours stripped, thousands separators read
    deepspeed, nano = read_log(DATA / "deepspeed.log"), read_log(DATA / "nanogpt.log")
    assert (deepspeed.engine, deepspeed.stated) == ("deepspeed", {"global_batch_size": 128, "dp": 8,
                                                                  "micro_batch_size": 16})
    assert (nano.engine, nano.records[1].seconds) == ("pytorch", pytest.approx(0.51))
    old_titan = parse_log("Building 2-D device mesh with ['dp_shard', 'tp'], [8, 2]\n"
                          "step:  1  loss: 10.9000  memory: 40.00GiB(50.00%)  wps: 1,000  tflops: 50.00  mfu: 16.00%\n",
                          "old.log")
    assert old_titan.stated["world_size"] == 16 and old_titan.records[0].tokens_per_s == 1000
    older_titan = parse_log("step:  2  loss: 10.9000  memory: 40.00GiB(50.00%)  wps: 2,000  mfu: 16.00%\n", "t.log")
    assert older_titan.records[0].tokens_per_s == 2000                      # before tflops was printed
    old_megatron = parse_log("using world size: 16, data-parallel-size: 8, tensor-model-parallel size: 2, "
                             "pipeline-model-parallel size: 1\n iteration       10/     200 | consumed samples: "
                             "1280 | elapsed time per iteration (ms): 1234.5 | lm loss: 1.0E+01 |\n", "m.log")
    assert old_megatron.stated == {"world_size": 16, "dp": 8, "tp": 2, "pp": 1}


def test_warm_up_is_dropped_and_torchtitan_tokens_become_seconds():
    scenario, plan = open_scenario(PLAN)
    measured = measure_log(read_log(DATA / "torchtitan.log"), scenario, plan.strategy, warmup=25)
    assert [r.step for r in measured.kept] == [30, 40, 50, 60, 70, 80, 90, 100] and measured.dropped == 3
    tokens = 128 * 4096
    assert measured.kept[0].seconds == pytest.approx(tokens / (read_log(DATA / "torchtitan.log").records[3]
                                                               .tokens_per_s * 16))
    assert measured.measurement.peak_memory_bytes is not None      # pp = 1: rank 0 is like every GPU


def test_a_scenario_without_a_plan_takes_the_strategy_megatron_prints(tmp_path, capsys):
    scenario_only = tmp_path / "s.yaml"
    import yaml

    scenario = yaml.safe_load(Path(PLAN).read_text())["scenario"]
    scenario_only.write_text(yaml.safe_dump(scenario))
    assert "ran on fewer or more than the scenario's 32" in one_line_error(
        capsys, ["calibrate", str(scenario_only), str(DATA / "megatron.log")])   # which 16 of the 32 GPUs?
    scenario["cluster"]["nodes"] = scenario["cluster"]["nodes"][:1]              # the two A100 nodes alone
    scenario_only.write_text(yaml.safe_dump(scenario))
    assert main(["calibrate", str(scenario_only), str(DATA / "megatron.log")]) == 0
    assert "2x1x8 micro-batch 16: measured 12.5 s" in capsys.readouterr().out
    assert "does not say which strategy ran" in one_line_error(capsys, ["calibrate", str(scenario_only),
                                                                       str(DATA / "torchtitan.log")])


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_bad_logs_get_one_line_each(tmp_path, capsys):
    good = (DATA / "megatron.log").read_text()
    startup = "\n".join(line for line in good.splitlines() if "iteration " not in line or "/" not in line) + "\n"
    assert "no iteration line of Megatron-LM, torchtitan, DeepSpeed or plain PyTorch" in one_line_error(
        capsys, ["calibrate", PLAN, write(tmp_path, "startup.log", startup)])
    other = good.replace("using world size: 16, data-parallel size: 8", "using world size: 32, data-parallel size: 16")
    assert "'world size 32': the plan's strategy 2x1x8 runs on 16 GPUs: this log is of another run" in one_line_error(
        capsys, ["calibrate", PLAN, write(tmp_path, "other.log", other)])
    titan = (DATA / "torchtitan.log").read_text().replace("dp_shard=8, cp=1, tp=2", "dp_shard=4, cp=1, tp=4")
    assert "'tensor-parallel size 4': the plan ran tensor-parallel size 2" in one_line_error(
        capsys, ["calibrate", PLAN, write(tmp_path, "titan.log", titan)])
    lines = good.splitlines(keepends=True)
    third = next(i for i, line in enumerate(lines) if "iteration       20/" in line)
    middle = lines[third].index("(ms): ") + 9
    cut = "".join(lines[:third]) + lines[third][:middle]      # copied while the run wrote line 3's time
    err = one_line_error(capsys, ["calibrate", PLAN, write(tmp_path, "cut.log", cut)])
    assert "1 iteration line after the warm-up" in err and "cut short while written" in err
    assert "not UTF-8" in one_line_error(capsys, ["calibrate", PLAN, str(_binary(tmp_path))])
    assert "no iteration line" in one_line_error(capsys, ["calibrate", PLAN, write(tmp_path, "empty.log", "")])


def _binary(tmp_path) -> Path:
    path = tmp_path / "binary.log"
    path.write_bytes(b"\xff\xfe\x00iteration 1/2 |\x80\x81")
    return path


def test_a_log_cut_after_enough_lines_calibrates_and_says_so(tmp_path, capsys):
    good = (DATA / "megatron.log").read_text()
    cut = good[:good.index("iteration       90/") + 40]
    assert main(["calibrate", PLAN, write(tmp_path, "cut.log", cut)]) == 0
    assert "note: its last line was cut short while written: left out" in capsys.readouterr().out


def test_input_is_bounded_and_a_missing_or_foreign_log_is_one_line(tmp_path, capsys):
    from amp_tui.core.calibration.logs import MAX_LOG_BYTES

    big = tmp_path / "big.log"
    with big.open("wb") as handle:
        handle.truncate(MAX_LOG_BYTES + 1)
    assert "larger than the limit" in one_line_error(capsys, ["calibrate", PLAN, str(big)])
    assert "no such file" in one_line_error(capsys, ["calibrate", PLAN, str(tmp_path / "none.log")])
    assert "--engine" in one_line_error(capsys, ["calibrate", PLAN, str(DATA / "megatron.log"), "--engine", "jax"])
    assert "no iteration line of torchtitan" in one_line_error(
        capsys, ["calibrate", PLAN, str(DATA / "megatron.log"), "--engine", "torchtitan"])
