"""Files in and out under hostile conditions: damaged plans, hostile names in exports, all-or-nothing
writes that keep permissions and leave no temporary files, and the command line's one-line errors."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_tui.cli import main
from amp_tui.core.base import atomic
from amp_tui.core.base.atomic import atomic_write, write_files
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_text
from amp_tui.core.plans.exports import EXPORT_FORMATS, export_plan
from amp_tui.core.plans.planfile import load_plan, save_plan
from amp_tui.core.search.search import search
from amp_tui.core.spec.scenario import load_scenario

HOSTILE = "x\n)\ntouch PWNED\nY=("


@pytest.fixture(scope="module")
def plan_text(tmp_path_factory):
    scenario = load_scenario("paper-het-cluster")
    path = save_plan(tmp_path_factory.mktemp("plan") / "plan.yaml", scenario, search(scenario).strategies[0])
    return path.read_text()


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("amp-tui: error: "), err
    return err.strip()


# -- plan files -------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_any_cut_inside_the_prediction_is_refused(plan_text, tmp_path, fraction):
    start = plan_text.index("\nprediction:")
    cut = start + int(fraction * (len(plan_text) - 1 - start))    # the final newline alone may go
    path = tmp_path / "cut.yaml"
    path.write_text(plan_text[:cut])
    with pytest.raises(SpecError) as info:
        load_plan(path)
    assert "\n" not in str(info.value)


def test_the_final_newline_may_go(plan_text, tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(plan_text.rstrip("\n"))
    assert load_plan(path).strategy


def _edited(text: str, edit) -> str:
    data = load_yaml_text(text)
    edit(data)
    return dump_yaml(data)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["prediction"]["stages"][0].update(compute_s=float("nan")), "prediction.stages[0].compute_s"),
    (lambda d: d["prediction"]["stages"].__setitem__(0, "gone"), "prediction.stages[0]"),
    (lambda d: d["prediction"].update(iteration_time_s=[1, 2]), "prediction.iteration_time_s"),
    (lambda d: d["prediction"].update(bubble_fraction=10**400), "prediction.bubble_fraction"),
    (lambda d: d.pop("end"), "end"),
    (lambda d: d.update(end="amp-tui/plan/"), "end"),
])
def test_damaged_prediction_is_refused(plan_text, tmp_path, edit, field):
    path = tmp_path / "bad.yaml"
    path.write_text(_edited(plan_text, edit))
    with pytest.raises(SpecError) as info:
        load_plan(path)
    assert info.value.field.endswith(field)


def test_a_prediction_that_disagrees_is_reported_not_trusted(plan_text, tmp_path, capsys):
    path = tmp_path / "edited.yaml"
    path.write_text(_edited(plan_text, lambda d: d["prediction"].update(iteration_time_s=1e-3)))
    plan = load_plan(path)
    export = export_plan(plan, "torchrun")
    assert "saved prediction differs" in export.notes[0] and "iteration_time_s: 0.001 ->" in export.notes[0]
    assert "predicted 0.001 s" not in export.files["launch.sh"]
    code, out, _ = run(capsys, "evaluate", path)
    assert code == 0 and "figures changed since the plan was saved" in out


def test_a_plan_without_format_is_not_read_as_a_scenario(plan_text, tmp_path, capsys):
    path = tmp_path / "noformat.yaml"
    path.write_text(_edited(plan_text, lambda d: d.pop("format")))
    assert "format" in refused(capsys, "export", path, "--format", "rankmap")


# -- hostile names in exports -----------------------------------------------------------------------

def _hostile_plan(plan_text, tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(plan_text)
    plan = load_plan(path)
    # Past validation (which refuses these names): the exporters must still keep them harmless.
    cluster = plan.scenario.cluster
    nodes = tuple(dataclasses.replace(g, gpu=dataclasses.replace(g.gpu, name=HOSTILE + '"""'), instance=HOSTILE)
                  for g in cluster.nodes)
    scenario = dataclasses.replace(plan.scenario, name=HOSTILE, model=dataclasses.replace(plan.scenario.model, name=HOSTILE),
                                   cluster=dataclasses.replace(cluster, nodes=nodes))
    return dataclasses.replace(plan, scenario=scenario)


def test_hostile_names_cannot_inject(plan_text, tmp_path):
    plan = _hostile_plan(plan_text, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    for fmt in EXPORT_FORMATS:
        for name, text in export_plan(plan, fmt).files.items():
            (work / name).write_text(text)
    result = subprocess.run(["bash", "-c", "set -e; source ./megatron_args.sh; echo ${#MEGATRON_ARGS[@]}"],
                            cwd=work, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 4
    subprocess.run(["bash", "-n", "launch.sh"], cwd=work, check=True, timeout=30)
    result = subprocess.run(["bash", "launch.sh"], cwd=work, capture_output=True, text=True, timeout=30,
                            env={"PATH": os.environ["PATH"], "MASTER_ADDR": "x", "NODE_RANK": "99"})
    assert result.returncode == 2 and "NODE_RANK must be" in result.stderr
    assert not (work / "PWNED").exists()
    compile((work / "planned_pipeline.py").read_text(), "planned_pipeline.py", "exec")
    for line in (work / "hostfile").read_text().splitlines():
        assert line.startswith("# ") or line.split()[0].startswith("node-")
    json.loads((work / "rankmap.json").read_text())
    json.loads((work / "ds_config.json").read_text())


def test_a_hostile_model_name_is_refused_at_input(tmp_path, capsys):
    data = load_scenario("paper-homogeneous").to_dict()
    data["model"]["name"] = HOSTILE
    path = tmp_path / "hostile.yaml"
    path.write_text(dump_yaml(data))
    assert "model.name" in refused(capsys, "plan", path)


# -- atomic writes ----------------------------------------------------------------------------------

@pytest.fixture(params=["unnamed", "staging folder"])
def staging(request, monkeypatch):
    """Both ways of staging new contents: unnamed files, and a hidden folder where those are missing."""
    if request.param == "staging folder":
        monkeypatch.setattr(atomic._Staging, "_unnamed", lambda self, mode: None)
    return request.param


def test_write_files_is_all_or_nothing(tmp_path, staging):
    (tmp_path / "b.txt").write_text("old b")
    with pytest.raises(SpecError) as info:
        write_files(tmp_path, {"a.txt": "new a", "b.txt": "new b"}, overwrite=False)
    assert "b.txt" in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["b.txt"] and (tmp_path / "b.txt").read_text() == "old b"
    write_files(tmp_path, {"a.txt": "new a", "b.txt": "new b"}, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]
    assert (tmp_path / "a.txt").read_text() == "new a" and (tmp_path / "b.txt").read_text() == "new b"


def test_a_file_that_appears_during_the_write_is_kept(tmp_path, staging, monkeypatch):
    monkeypatch.setattr(atomic, "_check_targets", lambda *args: None)     # as if b appeared after the check
    (tmp_path / "b").write_text("theirs")
    with pytest.raises(SpecError) as info:
        write_files(tmp_path, {"a": "new a", "b": "new b"}, overwrite=False)
    assert str(tmp_path / "b") in str(info.value) and "already exists" in info.value.reason
    assert os.listdir(tmp_path) == ["b"] and (tmp_path / "b").read_text() == "theirs"


def test_a_failed_commit_puts_the_old_files_back(tmp_path, staging, monkeypatch):
    monkeypatch.setattr(atomic, "_renameat2_exchange", lambda a, b: False)   # the back-to-back fallback
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text(f"old {name}")
    real_replace, calls = os.replace, []

    def failing_replace(source, target):
        calls.append(target)
        if len(calls) == 3:
            raise KeyboardInterrupt      # as if Ctrl-C arrived between two renames
        real_replace(source, target)

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(KeyboardInterrupt):
        write_files(tmp_path, {"a": "new a", "b": "new b", "c": "new c"})
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    assert {name: (tmp_path / name).read_text() for name in sorted(os.listdir(tmp_path))} == \
        {"a": "old a", "b": "old b", "c": "old c"}


def test_a_set_replaces_the_folder_in_one_exchange(tmp_path, monkeypatch):
    """The target folder holds the old set or the new one, and keeps the user's other files and
    its own permissions; a sibling a killed run left behind is cleaned up."""
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o750)
    for name in ("a", "b", "notes.txt"):
        (out / name).write_text(f"old {name}")
    (out / "a").chmod(0o600)
    dead = tmp_path / f".out{atomic._TAG}999999999-x"       # no such process
    dead.mkdir()
    swaps = []
    real = atomic._renameat2_exchange
    monkeypatch.setattr(atomic, "_renameat2_exchange", lambda a, b: swaps.append((a, b)) or real(a, b))
    monkeypatch.chdir(tmp_path)
    write_files(out, {"a": "new a", "b": "new b"})
    assert len(swaps) == 1 and sorted(os.listdir(tmp_path)) == ["out"]
    assert {n: (out / n).read_text() for n in sorted(os.listdir(out))} == \
        {"a": "new a", "b": "new b", "notes.txt": "old notes.txt"}
    assert stat.S_IMODE((out / "a").stat().st_mode) == 0o600 and stat.S_IMODE(out.stat().st_mode) == 0o750


def test_overwrite_keeps_the_mode(tmp_path, staging):
    target = tmp_path / "secret.yaml"
    target.write_text("old")
    target.chmod(0o600)
    atomic_write(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "new"
    fresh = atomic_write(tmp_path / "fresh.yaml", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~mask
    assert sorted(os.listdir(tmp_path)) == ["fresh.yaml", "secret.yaml"]


def test_plan_save_force_keeps_the_mode(tmp_path, capsys):
    target = tmp_path / "plan.yaml"
    target.write_text("old")
    target.chmod(0o600)
    code, _, err = run(capsys, "plan", "paper-homogeneous", "--save", target, "--force")
    assert code == 0, err
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and load_plan(target).strategy
    assert os.listdir(tmp_path) == ["plan.yaml"]


def test_export_refused_for_one_target_writes_none(plan_text, tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text)
    out = tmp_path / "out"
    out.mkdir()
    (out / "hostfile").write_text("mine")
    assert "hostfile" in refused(capsys, "export", plan, "--format", "deepspeed", "-o", out)
    assert os.listdir(out) == ["hostfile"] and (out / "hostfile").read_text() == "mine"
    (out / "hostfile").chmod(0o640)
    code, _, err = run(capsys, "export", plan, "--format", "deepspeed", "-o", out, "--force")
    assert code == 0, err
    assert sorted(os.listdir(out)) == ["ds_config.json", "hostfile", "pipeline_partition.json", "planned_pipeline.py"]
    assert stat.S_IMODE((out / "hostfile").stat().st_mode) == 0o640


@pytest.mark.parametrize("argv, expected", [
    (["plan", "paper-homogeneous", "--save", ""], "--save: '': give the plan file's name"),
    (["plan", "paper-homogeneous", "--top", "abc"], "plan: --top: 'abc' is not a whole number"),
    (["plan", "paper-homogeneous", "--rank", "1.5"], "plan: --rank: '1.5' is not a whole number"),
    (["plan"], "plan: the following arguments are required: SCENARIO"),
    (["export", "x.yaml"], "export: the following arguments are required: --format"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["plan", "paper-homogeneous", "--save", "/no/such/folder/plan.yaml"], "does not exist"),
    (["bench", "--runs", "1000000"], "--runs: 1000000: must be 1 to 100"),
    (["plan", "x" * 300 + ".yaml"], "File name too long"),
])
def test_command_line_errors_are_one_line(capsys, argv, expected):
    assert expected in refused(capsys, *argv)


def test_too_many_strategies(capsys, tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(dump_yaml([{"tp": 1, "pp": 1, "dp": 16, "micro_batch_size": 1}] * 1001))
    assert "more than the limit of 1,000" in refused(capsys, "evaluate", "paper-homogeneous", path)


def test_help_still_gives_usage(capsys):
    code, out, _ = run(capsys, "plan", "--help")
    assert code == 0 and out.startswith("usage: amp-tui plan") and "--top" in out


def test_json_is_strict(capsys, tmp_path):
    """A scenario where nothing fits has infinite times: JSON says null, never Infinity or NaN."""
    data = load_scenario("paper-homogeneous").to_dict()
    data["training"]["runtime_reserve"] = "15 GiB"
    path = tmp_path / "tight.yaml"
    path.write_text(dump_yaml(data))
    code, out, err = run(capsys, "plan", path, "--json")
    assert code == 1, err          # searched, nothing to plan (issue 28): the reason is in the JSON
    assert "Infinity" not in out and "NaN" not in out
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert err == ""     # no numpy warnings either


def test_sigterm_during_save_leaves_no_temporary_file(tmp_path):
    """SIGTERM turns into the same cleanup as Ctrl-C."""
    script = (
        "import os, signal, sys\n"
        "from amp_tui.core.base import atomic\n"
        "real = atomic._Staging.commit\n"
        "def commit(self, overwrite):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    real(self, overwrite)\n"
        "atomic._Staging.commit = commit\n"
        "atomic._Staging._unnamed = lambda self, mode: None\n"   # the named staging folder: the harder case
        "from amp_tui.cli import main\n"
        f"sys.exit(main(['plan', 'paper-homogeneous', '--save', {str(tmp_path / 'plan.yaml')!r}]))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 130 and result.stderr.strip() == "amp-tui: interrupted"
    assert os.listdir(tmp_path) == []


def test_a_temporary_left_by_a_killed_write_is_removed_by_the_next(tmp_path):
    """A run killed between linking the new file to its temporary name and the rename leaves that
    name; the next write of the file removes it, unless its process still runs."""
    from amp_tui.core.base.atomic import atomic_write

    dead = tmp_path / ".plan.yaml.amp-tui-999999999.tmp"
    alive = tmp_path / ".plan.yaml.amp-tui-1.tmp"          # pid 1 always runs
    other = tmp_path / ".other.yaml.amp-tui-999999999.tmp"
    for path in (dead, alive, other):
        path.write_text("partial")
    atomic_write(tmp_path / "plan.yaml", "whole")
    assert (tmp_path / "plan.yaml").read_text() == "whole"
    assert not dead.exists() and alive.exists() and other.exists()


def test_a_set_written_file_by_file_names_nothing_a_killed_run_would_leave(tmp_path, monkeypatch):
    """Where the folder cannot be swapped whole (it is the working directory), the files are
    renamed in back to back. A run killed (SIGKILL) at any of those instants must not leave a
    backup of a replaced file in the folder (issue 28: 12 of 30 kills left `.NAME...old` files):
    at every rename the folder holds only the targets, the user's files and that one rename's
    source; a failed commit still puts every old file back."""
    for name in ("a", "b", "notes.txt"):
        (tmp_path / name).write_text(f"old {name}")
    monkeypatch.chdir(tmp_path)
    seen = []
    real_replace = atomic.os.replace

    def watching_replace(source, target):
        seen.append(sorted(set(os.listdir(tmp_path)) - {"a", "b", "c", "notes.txt", os.path.basename(source)}))
        real_replace(source, target)

    monkeypatch.setattr(atomic.os, "replace", watching_replace)
    write_files(tmp_path, {"a": "new a", "b": "new b", "c": "new c"})
    assert seen == [[], [], []]
    assert {n: (tmp_path / n).read_text() for n in sorted(os.listdir(tmp_path))} == \
        {"a": "new a", "b": "new b", "c": "new c", "notes.txt": "old notes.txt"}
