"""ctrl+s: ask for the plan file's name (a sensible default is filled in)."""

from __future__ import annotations

from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.tui.screens.edit_value import EditValueScreen


def safe_file_stem(name: str, fallback: str = "plan") -> str:
    """`name` with characters unsafe in a file name replaced."""
    return "".join(c if c.isalnum() or c in "-_.+" else "-" for c in name).strip("-.") or fallback


def default_plan_name(scenario_name: str, label: str) -> str:
    """`<scenario-name>-<tp>x<pp>x<dp>.plan.yaml`."""
    return f"{safe_file_stem(scenario_name)}-{label}.plan.yaml"


def check_plan_path(text: str) -> Path:
    text = text.strip()
    if not text:
        raise SpecError("file", text, "enter a file name, e.g. my-cluster-1x4x4.plan.yaml")
    path = Path(text).expanduser()
    if path.is_dir():
        raise SpecError("file", path, "is a folder; add a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SpecError("file", path, f"folder {str(folder)!r} does not exist")
    return path


class SaveDialog(EditValueScreen):
    """Returns the Path to write (its folder exists); the app asks before overwriting."""

    def __init__(self, default: str, what: str, kind: str = "plan", warning: str | None = None) -> None:
        hint = ("File to write (relative to the current folder). It holds the whole scenario, "
                "the strategy and its predictions; open it again with `amp-tui ui FILE`." if kind == "plan" else
                "File to write (relative to the current folder): the scenario as edited, as YAML; "
                "open it again with `amp-tui ui FILE`.")
        if warning:     # said before the file is written (e.g. no stock engine runs this plan)
            hint = f"Warning: {warning}. {hint}"
        super().__init__(f"Save {kind}: {what}", default, check_plan_path, hint=hint)
