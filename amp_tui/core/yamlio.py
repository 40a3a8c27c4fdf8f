"""YAML in and out, and atomic file writes.

PyYAML follows YAML 1.1, which reads `2.5e10` (no dot) as a string; our loader resolves every
scientific-notation scalar as a float so that layer sizes load as numbers.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

import yaml

from amp_tui.core.errors import SpecError


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                 |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                 |\.[0-9_]+(?:[eE][-+][0-9]+)?
                 |[-+]?\.(?:inf|Inf|INF)
                 |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


class _Dumper(yaml.SafeDumper):
    pass


def _float_representer(dumper: yaml.SafeDumper, value: float) -> yaml.Node:
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return dumper.represent_scalar("tag:yaml.org,2002:float", text)


_Dumper.add_representer(float, _float_representer)


def load_yaml_text(text: str, source: str = "<text>") -> object:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(source, where, f"malformed YAML: {problem}") from None


def load_yaml_file(path: str | Path) -> object:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("file", path, "no such file") from None
    except IsADirectoryError:
        raise SpecError("file", path, "is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("file", path, f"cannot be read ({exc.__class__.__name__})") from None
    return load_yaml_text(text, str(path))


def dump_yaml(data: object) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, text: str, *, overwrite: bool = True) -> Path:
    """Write `text` to `path` via a temporary file in the same folder and a rename.

    A reader never sees a half-written file; with `overwrite=False` an existing file is kept and
    a SpecError names it.
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError("file", path, "is a folder, not a file")
    if not overwrite and path.exists():
        raise SpecError("file", path, "already exists (use --force to overwrite)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SpecError("file", path, f"folder {str(folder)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise SpecError("file", path, f"cannot be written ({exc.strerror})") from None
    try:
        # mkstemp makes 0600: give what open() would, or the permissions of the file overwritten.
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode) if overwrite and path.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if not overwrite:
            # link() fails if the target appeared meanwhile; rename() would clobber it.
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise SpecError("file", path, "already exists (use --force to overwrite)") from None
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):      # e.g. the target turned into a folder meanwhile
            raise SpecError("file", path, f"cannot be written ({exc.strerror or exc})") from None
        raise
    return path
