"""Atomic writes of one file or of a set of files into one folder: all of them or none.

Every target is checked before anything is written. One file is written and flushed to disk as an
unnamed file in the target folder (Linux O_TMPFILE), so a process killed at any moment before the
commit leaves nothing behind, and a rename gives it its name (replacing a file, it is linked to
a temporary name first: a run killed between that link and the rename leaves the temporary,
which the next write of that file removes).

A set of several files that may replace existing ones is built whole in a hidden sibling of the
target folder: the new files, and
hard links to everything else the folder holds. One renameat2(RENAME_EXCHANGE) then swaps the two
folders, so the target folder holds the old set or the new one at every instant, and never a
temporary file; the sibling (the old set after the swap) is removed, and one left by a killed run
is removed by the next. Where the exchange is not possible (another file system, a folder holding
sub-folders, the working directory itself), the files are renamed into place back to back and
rolled back on an error. An overwritten file keeps its permission bits.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from amp_tui.core.base.errors import SpecError

_TAG = ".amp-tui-"        # in every temporary name, so that leftovers are recognisable


def atomic_write(path: str | Path, text: str, *, overwrite: bool = True, field: str = "file") -> Path:
    """Write `text` to `path` atomically. With `overwrite=False` an existing file is kept and a
    SpecError names it."""
    path = Path(path)
    return write_files(path.parent, {path.name: text}, overwrite=overwrite, field=field)[0]


def write_files(folder: str | Path, files: dict[str, str], *, overwrite: bool = True,
                field: str = "file") -> list[Path]:
    """Write every `files` entry (name -> text) into `folder`, all or none. Errors name `field`."""
    folder = Path(folder) if str(folder) else Path(".")
    targets = [folder / name for name in files]
    _check_targets(folder, targets, overwrite, field)
    blobs = [text.encode("utf-8") for text in files.values()]   # a bad text fails before any write
    for target in targets:
        _remove_leftovers(folder, target.name)
    if len(targets) > 1 and overwrite and _exchange(folder, targets, blobs, field):
        return targets
    with _Staging(folder, field) as staging:
        for target, blob in zip(targets, blobs):
            staging.add(target, blob, _mode_for(target))
        staging.commit(overwrite)
    return targets


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2_exchange(a: Path, b: Path) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.renameat2
    except (OSError, AttributeError):
        return False
    return call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _exchange(folder: Path, targets: list[Path], blobs: list[bytes], field: str) -> bool:
    """Build the whole new folder beside the old one and swap them in one system call; False
    (nothing changed) where that cannot be done, so the caller falls back."""
    folder = folder.resolve()
    if Path.cwd().resolve().is_relative_to(folder):
        return False           # the working directory would move away with the old folder
    parent = folder.parent
    _remove_leftovers(parent, folder.name)
    names = {target.name for target in targets}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    if any(e.name not in names and not e.is_file(follow_symlinks=False) for e in entries):
        return False           # sub-folders and links cannot be hard-linked into the new folder
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{folder.name}{_TAG}{os.getpid()}-", dir=parent))
    except OSError:
        return False
    try:
        for entry in entries:
            if entry.name not in names:
                os.link(entry.path, stage / entry.name, follow_symlinks=False)
        for target, blob in zip(targets, blobs):
            fd = os.open(stage / target.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode_for(target))
            try:
                _write_all(fd, blob)
                os.fchmod(fd, _mode_for(target))      # the umask must not narrow a kept mode
                os.fsync(fd)
            finally:
                os.close(fd)
        os.chmod(stage, stat.S_IMODE(os.stat(folder).st_mode))
        _sync_folder(stage)
        if not _renameat2_exchange(stage, folder):
            return False
        # A file someone else created in the folder while the new one was built is moved across.
        for entry in os.scandir(stage):
            if entry.name not in names and not os.path.lexists(folder / entry.name):
                os.rename(entry.path, folder / entry.name)
        _sync_folder(parent)
        return True
    except OSError as exc:
        raise SpecError(field, Path(exc.filename or folder), f"cannot be written ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)    # the old set after the swap, the new one before


def _remove_leftovers(parent: Path, name: str) -> None:
    """What a killed run left beside `name` (its process is gone): a sibling staging folder, or
    the temporary name a file held between its link and its rename (.NAME.amp-tui-PID.tmp)."""
    prefix = f".{name}{_TAG}"
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid = re.match(r"\d*", entry.name[len(prefix):]).group()
        if not pid or _alive(int(pid)):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_targets(folder: Path, targets: list[Path], overwrite: bool, field: str) -> None:
    if not folder.is_dir():
        raise SpecError(field, targets[0] if len(targets) == 1 else folder,
                        f"folder {str(folder)!r} does not exist")
    for target in targets:
        if target.is_dir():
            raise SpecError(field, target, "is a folder, not a file")
        if os.path.lexists(target) and not overwrite:
            raise SpecError(field, target, "already exists (use --force to overwrite)")
        if os.path.lexists(target) and not target.is_file():
            raise SpecError(field, target, "exists and is not a regular file")


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)    # keep an overwritten file's permissions
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask                             # what open() would give a new file


class _Staging:
    """New contents waiting to be committed: unnamed files, or files in a hidden staging folder."""

    def __init__(self, folder: Path, field: str):
        self.folder, self.field = folder, field
        self.entries: list[tuple[Path, int | None, Path | None]] = []   # (target, fd, staged path)
        self.staging_dir: Path | None = None
        self.named: list[Path] = []          # temporary names given during the commit

    def __enter__(self) -> "_Staging":
        return self

    def add(self, target: Path, blob: bytes, mode: int) -> None:
        fd = self._unnamed(mode)
        staged = None
        if fd is None:
            if self.staging_dir is None:
                self.staging_dir = Path(self._guard(tempfile.mkdtemp, prefix=_TAG, dir=self.folder))
            staged = self.staging_dir / target.name
            fd = self._guard(os.open, staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.entries.append((target, fd, staged))
        self._guard(os.fchmod, fd, mode)
        self._guard(_write_all, fd, blob)
        self._guard(os.fsync, fd)

    def _unnamed(self, mode: int) -> int | None:
        if not hasattr(os, "O_TMPFILE") or not os.path.isdir("/proc/self/fd"):
            return None
        try:
            return os.open(self.folder, os.O_TMPFILE | os.O_WRONLY, mode)
        except OSError:
            return None         # a file system without unnamed files: use the staging folder

    def commit(self, overwrite: bool) -> None:
        done: list[tuple[Path, tuple[bytes, int] | None]] = []   # (target, what it replaced)
        target = self.folder
        try:
            for target, fd, staged in self.entries:
                if not overwrite:
                    self._link(fd, staged, target)      # fails, not clobbers, if the name appeared
                    done.append((target, None))
                    continue
                backup = self._backup(target)
                source = staged
                if staged is None:
                    source = self.folder / f".{target.name}{_TAG}{os.getpid()}.tmp"
                    self.named.append(source)
                    self._link(fd, None, source)
                os.replace(source, target)
                done.append((target, backup))
        except BaseException as exc:
            if len(self.entries) > 1:            # one file: the rename either happened or not
                self._roll_back(done)
            if isinstance(exc, FileExistsError) and not overwrite:
                raise SpecError(self.field, target, "already exists (use --force to overwrite)") from None
            if isinstance(exc, OSError):
                raise SpecError(self.field, target, f"cannot be written ({exc.strerror or exc})") from None
            raise
        _sync_folder(self.folder)

    def _link(self, fd: int, staged: Path | None, name: Path) -> None:
        if staged is not None:
            os.link(staged, name)
            return
        # An unnamed file gets its name through /proc; CPython calls linkat with AT_SYMLINK_FOLLOW,
        # which that needs, only when given a folder descriptor.
        folder = os.open(name.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.link(f"/proc/self/fd/{fd}", name.name, dst_dir_fd=folder, follow_symlinks=True)
        finally:
            os.close(folder)

    def _backup(self, target: Path) -> tuple[bytes, int] | None:
        """The contents and mode of the file about to be replaced, so that a failed commit can put
        it back; only kept when there is more than one file to commit. Held in memory, not under a
        second name in the folder: a run killed mid-commit (SIGKILL) leaves no backup behind."""
        if len(self.entries) == 1 or not target.exists():
            return None
        return target.read_bytes(), stat.S_IMODE(os.stat(target).st_mode)

    def _roll_back(self, done: list[tuple[Path, tuple[bytes, int] | None]]) -> None:
        for target, backup in reversed(done):
            try:
                if backup is None:
                    os.unlink(target)
                    continue
                blob, mode = backup
                temporary = self.folder / f".{target.name}{_TAG}{os.getpid()}.tmp"
                self.named.append(temporary)
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
                try:
                    _write_all(fd, blob)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                os.replace(temporary, target)
            except OSError:
                pass

    def _guard(self, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except OSError as exc:
            raise SpecError(self.field, Path(exc.filename or self.folder),
                            f"cannot be written ({exc.strerror or exc})") from None

    def __exit__(self, *exc_info) -> None:
        for _, fd, _ in self.entries:
            if fd is not None:
                os.close(fd)
        for path in self.named:
            try:
                os.unlink(path)
            except OSError:
                pass
        if self.staging_dir is not None:
            shutil.rmtree(self.staging_dir, ignore_errors=True)


def _write_all(fd: int, blob: bytes) -> None:
    view = memoryview(blob)
    while view:
        view = view[os.write(fd, view):]


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
