"""Fuzzing the command line in-process: mutated scenarios, strategies and plans, hostile files from
corpus/, and random command lines. Every input must end in exit 0 with valid output, or exit 2
with exactly one line naming a field; never an internal error, a traceback, a hang or a memory blow-up.

Runs `amp_tui.cli.main(argv)` in this process (a subprocess per example would take minutes); the
few cases that need a real process (/dev/zero, a FIFO, SIGKILL during a save) spawn one.
"""

from __future__ import annotations

import copy
import json
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_text
from amp_tui.core.plans.exports import export_plan
from amp_tui.core.plans.planfile import load_plan, save_plan
from amp_tui.core.search.search import search
from amp_tui.core.spec.scenario import load_scenario

CORPUS = Path(__file__).parent / "corpus"
BASE = load_scenario("paper-homogeneous").to_dict()
STRATEGY = {"tp": 1, "pp": 2, "dp": 8, "micro_batch_size": 2}
# Per input: far above what any accepted input here needs, far below what the held-back corpus allows
# (10 s, 2 GB).
DEADLINE = timedelta(seconds=8)
MAX_PEAK_BYTES = 500 * 2**20

HOSTILE = [10**400, -1, 0, 1e308, -1e308, 5e-324, float("inf"), float("nan"), 1e9, 1e12, 2**63, -0.0, 1.5,
           1e30, 1e-30, 2**40, 1e3, 1e18,                                  # at the limits: accepted
           "", " ", "x\n)\ntouch PWNED\nY=(", "a" * 300, "\u202e", "\x00", "1e9", "5e-324 Gbps", "1e400 GB",
           "../scenarios/paper-homogeneous", "/dev/zero", [], [1], ["a"], {}, {"a": 1}, None, True, False]
hostile_values = st.one_of(st.sampled_from(HOSTILE), st.integers(), st.floats(), st.text(max_size=40))


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_outcome(code: int, out: str, err: str, *, json_output: bool = False) -> None:
    """Exit 0 with valid output, or exit 2 with one line naming a field, or (plan, issue 28) exit 1
    where nothing can train, with valid JSON that ranks nothing and says why; nothing else."""
    assert "Traceback" not in out + err
    if code == 1 and json_output:
        data = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
        assert data["strategies"] == [] and data["no_strategy"].strip() and err == "", (out, err)
        return
    if code == 0:
        if json_output:
            json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
        else:
            assert out.strip()
        assert "internal error" not in err and "Warning" not in err
        return
    assert code == 2, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("amp-tui: error: ")
    field = lines[0].removeprefix("amp-tui: error: ").split(": ")
    assert len(field) >= 2 and field[0].strip(), lines[0]      # "FIELD: VALUE: REASON" or "COMMAND: ..."


def paths(data, prefix=()):
    """Every key path in a nested mapping/list (inner nodes and leaves)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield prefix + (key,)
            yield from paths(value, prefix + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield prefix + (i,)
            yield from paths(value, prefix + (i,))


def mutate(data, path, value):
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def bounded(call):
    """Run `call` and assert its peak traced memory stays under MAX_PEAK_BYTES."""
    tracemalloc.start()
    try:
        return call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < MAX_PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"


SCENARIO_PATHS = sorted(paths(BASE), key=repr)
SCALE = int(os.environ.get("AMP_HYPOTHESIS_SCALE", "1"))    # e.g. 20 for a longer hunt
FUZZ = settings(max_examples=40 * SCALE, deadline=DEADLINE, suppress_health_check=list(HealthCheck))


@FUZZ
@given(path=st.sampled_from(SCENARIO_PATHS), value=hostile_values, data=st.data())
def test_mutated_scenarios(tmp_path_factory, capsys, path, value, data):
    scenario = mutate(BASE, path, value)
    if data.draw(st.booleans()):
        second = data.draw(st.sampled_from(sorted(paths(scenario), key=repr)))
        scenario = mutate(scenario, second, data.draw(hostile_values))
    file = tmp_path_factory.mktemp("s") / "scenario.yaml"
    file.write_text(dump_yaml(scenario))
    code, out, err = bounded(lambda: run(["plan", file, "--top", "2", "--json"], capsys))
    check_outcome(code, out, err, json_output=True)


@FUZZ
@given(key=st.sampled_from([*STRATEGY, "partition", "placement", "colour"]), value=hostile_values)
def test_mutated_strategies(tmp_path_factory, capsys, key, value):
    file = tmp_path_factory.mktemp("s") / "strategies.yaml"
    file.write_text(dump_yaml([{**STRATEGY, key: value}]))
    code, out, err = bounded(lambda: run(["evaluate", "paper-homogeneous", file, "--json"], capsys))
    check_outcome(code, out, err, json_output=True)


@pytest.fixture(scope="module")
def plan_text(tmp_path_factory) -> str:
    scenario = load_scenario("paper-homogeneous")
    path = save_plan(tmp_path_factory.mktemp("plan") / "plan.yaml", scenario, search(scenario).strategies[0])
    return path.read_text()


@FUZZ
@given(data=st.data(), command=st.sampled_from(["evaluate", "megatron", "deepspeed", "torchrun", "rankmap"]))
def test_mutated_and_truncated_plans(plan_text, tmp_path_factory, capsys, data, command):
    truncated = data.draw(st.booleans())
    if truncated:
        text = plan_text[:data.draw(st.integers(0, len(plan_text) - 2))]   # the final newline alone may go
    else:
        plan = load_yaml_text(plan_text)
        plan = mutate(plan, data.draw(st.sampled_from(sorted(paths(plan), key=repr))), data.draw(hostile_values))
        text = dump_yaml(plan)
    file = tmp_path_factory.mktemp("p") / "plan.yaml"
    file.write_text(text)
    argv = ["evaluate", file, "--json"] if command == "evaluate" else ["export", file, "--format", command]
    code, out, err = bounded(lambda: run(argv, capsys))
    assert not (truncated and code == 0), "a truncated plan was accepted"
    check_outcome(code, out, err, json_output=command == "evaluate")


TOKENS = ["paper-homogeneous", "paper-het-cluster", "--top", "--rank", "--json", "--save", "--force", "--format",
          "megatron", "-o", "--runs", "--only", "0", "-1", "abc", "1e9", "", "x\ny", "/dev/zero", "--help-me",
          "--", "-", "evaluate", "plan", "export", "presets", "nosuch.yaml", "a" * 300]


@settings(max_examples=80 * SCALE, deadline=DEADLINE, suppress_health_check=list(HealthCheck))
@given(command=st.sampled_from(["plan", "evaluate", "export", "presets", "frobnicate"]),
       rest=st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=12)), max_size=5))
def test_random_command_lines(tmp_path_factory, capsys, monkeypatch, command, rest):
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))      # a stray --save writes here, not in the checkout
    code, out, err = run([command, *rest], capsys)
    check_outcome(code, out, err, json_output="--json" in rest and code == 0 and "--help" not in rest)


# -- the corpus of hostile files ------------------------------------------------------------------

CORPUS_FILES = sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_is_there():
    names = {path.stem for path in CORPUS_FILES}
    assert {"alias-bomb", "deep-nesting", "huge-integer", "huge-numbers", "odd-names", "truncated-plan"} <= names


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("argv", [["plan", "{}"], ["evaluate", "{}"], ["export", "{}", "--format", "torchrun"]],
                         ids=["plan", "evaluate", "export"])
def test_corpus_file_is_refused(capsys, path, argv):
    code, out, err = bounded(lambda: run([a.format(path) for a in argv], capsys))
    assert code == 2, (out, err)
    check_outcome(code, out, err)


# -- what needs a real process --------------------------------------------------------------------

def _cli(*argv, timeout=30, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amp_tui", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, cwd=Path(__file__).parents[2], **kwargs)


def test_dev_zero_and_a_fifo_are_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for target in ("/dev/zero", fifo):
        result = _cli("plan", target, timeout=20)
        assert result.returncode == 2 and "not a regular file" in result.stderr
        assert len(result.stderr.splitlines()) == 1


def _kill_at_random(argv_of, kills: int, seed: int):
    """Start `amp-tui ARGV` (argv_of(k) for run k) `kills` times and SIGKILL it at a random moment."""
    rng = random.Random(seed)
    started = time.perf_counter()
    assert _cli(*argv_of(0)).returncode == 0                      # one full run, to time it
    length = time.perf_counter() - started
    for k in range(1, kills + 1):
        process = subprocess.Popen([sys.executable, "-m", "amp_tui", *map(str, argv_of(k))],
                                   cwd=Path(__file__).parents[2], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.1) * length)
        process.send_signal(signal.SIGKILL)
        process.wait()
        yield


def test_sigkill_during_plan_save_never_leaves_a_partial_file(tmp_path):
    target = tmp_path / "plan.yaml"
    ranks = []
    for _ in _kill_at_random(lambda k: ["plan", "paper-homogeneous", "--save", target, "--force", "--rank", 1 + k % 2],
                             kills=6, seed=1):
        # A kill between the new file's link to its temporary name and the rename leaves that
        # temporary (recognisably named); the next write removes it.
        others = sorted(set(os.listdir(tmp_path)) - {"plan.yaml"})
        assert all(name.startswith(".plan.yaml.amp-tui-") and name.endswith(".tmp") for name in others), others
        ranks.append(load_plan(target).strategy)           # the old plan or the new one, whole
    assert _cli("plan", "paper-homogeneous", "--save", target, "--force").returncode == 0
    assert os.listdir(tmp_path) == ["plan.yaml"]


def test_sigkill_during_export_never_leaves_a_mixed_set(tmp_path):
    scenario = load_scenario("paper-homogeneous")
    plans = [save_plan(tmp_path / f"plan{rank}.yaml", scenario, prediction)
             for rank, prediction in enumerate(search(scenario).strategies[:2])]
    sets = [export_plan(load_plan(plan), "rankmap").files for plan in plans]
    assert sets[0] != sets[1]
    out = tmp_path / "out"
    for _ in _kill_at_random(lambda k: ["export", plans[k % 2], "--format", "rankmap", "-o", out, "--force"],
                             kills=6, seed=2):
        found = {name: (out / name).read_text() for name in os.listdir(out)}
        assert found in sets, f"a mix of files, or a temporary one: {sorted(found)}"
