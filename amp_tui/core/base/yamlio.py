"""YAML in and out, within the limits of core/base/limits.py.

PyYAML follows YAML 1.1, which reads `2.5e10` (no dot) as a string; our loader resolves every
scientific-notation scalar as a float so that layer sizes load as numbers.

Files are read only when they are regular files (a FIFO or /dev/zero would block or never end) and
no larger than MAX_FILE_BYTES. The loader counts nesting depth and nodes, aliases expanded, as it
composes, so an alias bomb or a deeply nested file is refused before anything expands it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from amp_tui.core.base.atomic import atomic_write  # noqa: F401 - re-exported for callers of yamlio
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_FILE_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES

try:   # libyaml's parser, with PyYAML's own composer on top so that compose_node stays ours
    from yaml._yaml import CParser as _Parser

    _PARSER_BASES: tuple = (_Parser,)
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    _PARSER_BASES = (Reader, Scanner, Parser)


class _TooBig(yaml.YAMLError):
    def __init__(self, problem: str, mark):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _Loader(Composer, *_PARSER_BASES, SafeConstructor, Resolver):
    """A safe loader that refuses documents nested deeper than MAX_YAML_DEPTH or holding more than
    MAX_YAML_NODES nodes once aliases are expanded (each node records its expanded size)."""

    def __init__(self, stream):
        _PARSER_BASES[0].__init__(self, stream)
        for base in _PARSER_BASES[1:]:
            base.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            node = self.anchors.get(anchor)
            if node is not None:      # an unknown anchor gets PyYAML's own error below
                if not hasattr(node, "_expanded"):
                    raise _TooBig("an alias refers to the value that holds it", self.peek_event().start_mark)
                self._count(node._expanded, node.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _TooBig(f"nested more than {MAX_YAML_DEPTH} levels deep", self.peek_event().start_mark)
        before = self._nodes
        self._count(1, self.peek_event().start_mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        node._expanded = self._nodes - before
        return node

    def _count(self, nodes: int, mark) -> None:
        self._nodes += nodes
        if self._nodes > MAX_YAML_NODES:
            raise _TooBig(f"more than {MAX_YAML_NODES:,} values once aliases are expanded", mark)



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
    if len(text) > MAX_FILE_BYTES:
        raise SpecError(source, f"{len(text):,} characters", f"larger than the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - safe: SafeConstructor only
    except RecursionError:
        raise SpecError(source, "?", "malformed YAML: nested too deeply") from None
    except (ValueError, OverflowError) as exc:   # e.g. a 5,000-digit integer, or a 13th month
        raise SpecError(source, "?", f"malformed YAML: {str(exc).splitlines()[0][:100]}") from None
    except yaml.YAMLError as exc:
        raise syntax_error(exc, text, source) from None


def syntax_error(exc: yaml.YAMLError, text: str, source: str) -> SpecError:
    """'FILE (line 5, column 1): 'the line': malformed YAML: what (while parsing what from line 3)':
    the position names where, the line's text is the value (none past the last line)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context, since = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and since is not None and (mark is None or since.line != mark.line):
        problem += f" ({context} from line {since.line + 1})"
    if mark is None:
        return SpecError(source, None, f"malformed YAML: {problem}")
    lines = text.splitlines()
    line = lines[mark.line].strip() if mark.line < len(lines) else ""
    return SpecError(f"{source} (line {mark.line + 1}, column {mark.column + 1})", line or None,
                     f"malformed YAML: {problem}")


def load_yaml_file(path: str | Path) -> object:
    path = Path(path)
    return load_yaml_text(read_text_file(path), str(path))


def load_yaml_document(path: str | Path, expected: str) -> object:
    """load_yaml_file, refusing in one line a file with no YAML value in it (empty, or blank lines
    and comments only) rather than letting it read as None ('NoneType': expected ...)."""
    data = load_yaml_file(path)
    if data is None:
        raise SpecError("file", Path(path), f"is empty (no YAML value in it, only blank lines or comments): "
                                            f"expected {expected}")
    return data


def read_text_file(path: Path, field: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """A regular file's UTF-8 text, at most `limit` bytes. Opened without blocking and checked
    before reading, so that a FIFO, a device or a folder is refused at once."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SpecError(field, path, "no such file") from None
    except IsADirectoryError:
        raise SpecError(field, path, "is a directory, not a file") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise SpecError(field, path, f"cannot be read ({reason})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SpecError(field, path, "is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(field, path, "is not a regular file (a device, pipe or socket)")
        if info.st_size > limit:
            raise SpecError(field, path, f"larger than the limit of {limit:,} bytes")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise SpecError(field, path, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    if len(data) > limit:       # it grew while we read it
        raise SpecError(field, path, f"larger than the limit of {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(field, path, "cannot be read (UnicodeDecodeError: not UTF-8 text)") from None


def path_exists(path: str | Path) -> bool:
    """Path.exists without the errors an odd name raises (too long, a NUL byte...)."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False


def dump_yaml(data: object) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
