"""The README's walkthrough and the docs' examples run as written and print what they quote.

A `$ amp-tui ...` line in an indented block is run (in a scratch folder, in the order the file gives
them); the lines under it, up to the next `$`, must appear in its output in that order. A quoted line
ending in `...` is a line cut short: an output line must start with what comes before it. A ```yaml
block that a paragraph introduces with a file name in backticks (`my-cluster.yaml`) is written to
that file first. So every figure a document quotes is pinned here, and a change that moves one fails
until the document says the new figure.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_file
from amp_tui.core.spec.scenario import parse_scenario

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", "docs/calibration.md", "docs/cli.md", "docs/cluster.md"]
# Files a document's commands read, copied into the scratch folder first.
INPUTS = {"docs/cluster.md": ROOT / "tests" / "data" / "cluster"}
README_MAX_LINES = 250


def examples(text: str) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """(file name -> YAML text, [(command, quoted output lines)]) in the document's order."""
    files: dict[str, str] = {}
    commands: list[tuple[str, list[str]]] = []
    paragraph: list[str] = []       # the last paragraph of text before here
    quoting = False                 # inside the indented block of the last command
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```yaml"):
            end = lines.index("```", i + 1)
            named = re.findall(r"`([\w.-]+\.yaml)`", " ".join(paragraph))
            if named:
                files[named[0]] = "\n".join(lines[i + 1:end]) + "\n"
            i, paragraph = end + 1, []
            continue
        if line.startswith("    $ amp-tui "):
            commands.append((line.strip()[2:], []))
            quoting = True
        elif line.startswith("    ") and commands and quoting:
            commands[-1][1].append(line[4:])
        elif line.strip() and not line.startswith("    "):
            quoting = False         # text again: the block of the last command is over
            previous_blank = i > 0 and not lines[i - 1].strip()
            paragraph = [line] if previous_blank else [*paragraph, line]
        i += 1
    return files, commands


def appears_in_order(quoted: list[str], output: list[str]) -> str | None:
    """The first quoted line not found in `output` after the previous one, or None."""
    at = 0
    for want in quoted:
        cut = want.rstrip().endswith("...")
        want = want.rstrip().removesuffix("...").rstrip()
        for j in range(at, len(output)):
            got = output[j].rstrip()
            if got.startswith(want) if cut else got == want:
                at = j + 1
                break
        else:
            return want
    return None


def measured(scenario_name: str, path: Path) -> None:
    """What a user does between `--suggest` and the fit: run the strategies and fill in the times
    (here, where the document does not give them: each one's prediction, 20% slower)."""
    from amp_tui.core.plans.planfile import open_scenario
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.strategy import parse_strategy

    runs = load_yaml_file(path)
    scenario = open_scenario(scenario_name)[0]
    for run in runs:
        if run.get("iteration_time_s") is None:
            strategy = parse_strategy({k: v for k, v in run.items() if k != "iteration_time_s"})
            run["iteration_time_s"] = round(evaluate(scenario, strategy).iteration_time_s * 1.2, 3)
    path.write_text(dump_yaml(runs))


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_examples_run_as_written(document, tmp_path, monkeypatch, capsys):
    files, commands = examples((ROOT / document).read_text())
    assert commands, f"{document} quotes no command"
    monkeypatch.chdir(tmp_path)
    if document in INPUTS:
        for source in INPUTS[document].iterdir():
            (tmp_path / source.name).write_bytes(source.read_bytes())
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "bad.yaml").write_text(dump_yaml({
        "cluster": {"nodes": [{"instance": "p4d.24xlarge", "count": 1, "inter_node_bandwidth": "-5 Gbps"}]},
        "model": {"preset": "gpt2-medium"}, "training": {"global_batch_size": 8}}))
    for command, quoted in commands:
        argv = command.split()[1:]
        if argv[0] == "calibrate" and len(argv) > 2 and argv[2].endswith(".yaml"):
            measured(argv[1], tmp_path / argv[2])
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == (2 if "bad.yaml" in argv else 0), f"{command}: {err}"
        missing = appears_in_order(quoted, (out + err).splitlines())
        assert missing is None, f"{document}: `{command}` no longer prints:\n{missing}\n\nit prints:\n{out}{err}"


def test_the_readme_is_short_and_its_scenario_format_parses():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    brief = text.split("## Scenario files in brief", 1)[1].split("```yaml\n", 1)[1].split("\n```", 1)[0]
    import yaml

    scenario = parse_scenario(yaml.safe_load(brief))
    assert scenario.cluster.num_gpus == 16 and scenario.model.name == "gpt2-medium"
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        assert (ROOT / link).exists(), link
