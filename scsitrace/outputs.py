"""Outputs are transactions: what a command writes appears whole under its final name, or
not at all.

- `replacing(path)`: a temporary file beside the target (same directory, so the same file
  system), renamed over the target only once the writer finished; on any failure the
  temporary is removed and the old file, if any, is left as it was. Two writers of one
  output each write their own temporary, so they never interleave: the last rename wins
  whole.
- `writing(path, mode)`: the same, as an open file; `-` is standard output.
- `Pending(path)`: the same for a writer that is fed over time (`--ios` of the streaming
  layers): `commit()` or `discard()`.
- `replacing_dir(path)`: a dataset directory built beside the old one and swapped in when
  complete (the old one is kept until then).
- `check_outputs(outputs, inputs)`: before any work: the directory of each output exists
  and is writable, no output names an input (same file, a per-CPU sibling of a blktrace
  input, a file of a manifest or under a dataset directory that would be replaced), `-` only
  where the output can stream and only once.

A failure to write (ENOSPC, a read-only file system, EFBIG) is `OutputError` (exit 2) naming
the output, never a partial file under the final name.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import sys

from .errors import ScsitraceError

STDOUT = "-"
PART = ".part"          # suffix of the temporaries (".NAME.RANDOM.part", hidden beside the target)


class OutputError(ScsitraceError):
    """An output cannot be written where the user asked (exit 2)."""


def is_stdout(path) -> bool:
    return path is not None and str(path) == STDOUT


# ---------------------------------------------------------------- writing

def _temporary_name(path: str) -> str:
    head, name = os.path.split(os.path.abspath(path))
    return os.path.join(head, f".{name}.{os.urandom(4).hex()}{PART}")


def _create(path: str) -> str:
    """A new empty temporary beside `path` (mode 0666 less the umask, as open(path, 'w'))."""
    for _ in range(8):
        tmp = _temporary_name(path)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(path, exc) from None
    raise OutputError(f"{path}: cannot create a temporary file beside it")


def write_error(path, exc: BaseException) -> OutputError:
    """The one line for a failed write: the output and the system's reason."""
    reason = _os_reason(exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
    return OutputError(f"{path}: cannot write: {reason}")


_RUST_IO = re.compile(r"\(os error (\d+)\)|\[errno (\d+)\]")   # polars (Rust) and pyarrow


def _os_reason(text: str) -> str:
    """A library's message for an I/O error, reduced to the system's reason ('No space left
    on device'); polars and pyarrow wrap the errno in their own words."""
    m = _RUST_IO.search(text)
    if m:
        return os.strerror(int(m.group(1) or m.group(2)))
    for code in (errno.ENOSPC, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EDQUOT, errno.EIO):
        if os.strerror(code) in text:
            return os.strerror(code)
    return text.splitlines()[0] if text.strip() else "write failed"


def is_write_failure(exc: BaseException) -> bool:
    """An exception from a writer that is the system refusing the write (not a bug)."""
    if isinstance(exc, OSError):
        return True
    text = str(exc)
    return bool(_RUST_IO.search(text)) or any(
        os.strerror(c) in text for c in (errno.ENOSPC, errno.EROFS, errno.EFBIG, errno.EDQUOT, errno.EIO))


def is_special(path) -> bool:
    """An existing output that is not a regular file (/dev/null, a FIFO a reader waits on):
    written in place, never replaced by a rename."""
    try:
        mode = os.stat(str(path)).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


class Pending:
    """One output being written: `tmp` is where the writer writes; `commit()` renames it over
    `path`, `discard()` removes it. Standard output (`-`) has no temporary (`tmp` is None); a
    device or a FIFO (/dev/null) is written in place (`tmp` is the path itself)."""

    def __init__(self, path):
        self.path = str(path)
        self.direct = is_special(self.path)
        self.tmp = None if is_stdout(self.path) else self.path if self.direct else _create(self.path)

    def commit(self) -> None:
        if self.tmp is None or self.direct:
            return
        try:
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.discard()
            raise write_error(self.path, exc) from None
        self.tmp = None

    def discard(self) -> None:
        if self.tmp is not None and not self.direct:
            with contextlib.suppress(OSError):
                os.remove(self.tmp)
            self.tmp = None


@contextlib.contextmanager
def replacing(path):
    """A temporary path to write; renamed to `path` when the block ends without error."""
    pending = Pending(path)
    tmp = pending.tmp
    try:
        yield tmp
    except BaseException as exc:
        pending.discard()
        if _failed_writing(exc, (tmp, str(path))):
            raise write_error(path, exc) from None
        raise
    pending.commit()


def _failed_writing(exc: BaseException, names) -> bool:
    """Whether an exception out of a writer's block is the output failing (an input read in
    the same block, which names its own file, is not)."""
    if not isinstance(exc, Exception) or isinstance(exc, ScsitraceError) or not is_write_failure(exc):
        return False
    named = getattr(exc, "filename", None)
    return named is None or str(named) in names


@contextlib.contextmanager
def writing(path, mode: str = "w"):
    """An open file for `path` (text mode: UTF-8, "\\n"), whole or not at all; `-` is
    standard output (flushed, not closed)."""
    if is_stdout(path):
        out = stdout_bytes() if "b" in mode else sys.stdout
        yield out
        out.flush()
        return
    with replacing(path) as tmp:
        kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
        with open(tmp, mode, **kwargs) as fh:
            yield fh


class _TextBytes:
    """Bytes written to a text stream (standard output replaced by a StringIO: tests,
    notebooks)."""

    def __init__(self, text):
        self.text = text

    def write(self, data) -> int:
        self.text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self.text.flush()


def stdout_bytes():
    """Standard output as a binary stream."""
    return getattr(sys.stdout, "buffer", None) or _TextBytes(sys.stdout)


def for_stdout(frame):
    """The frame as it may go to standard output: on a terminal, its text made inert."""
    if not sys.stdout.isatty():
        return frame
    from .inert import terminal_safe
    return terminal_safe(frame)


def write_frame(path, frame, parquet: bool | None = None) -> None:
    """A polars frame as Parquet (`parquet`, or the path ends in .parquet) or CSV; `-` is CSV
    on standard output (on a terminal, control characters escaped: inert.terminal_safe)."""
    if is_stdout(path):
        frame = for_stdout(frame)
        frame.write_csv(stdout_bytes())
        sys.stdout.flush()
        return
    if parquet is None:
        parquet = str(path).lower().endswith(".parquet")
    with replacing(path) as tmp:
        if parquet:
            frame.write_parquet(tmp)
        else:
            frame.write_csv(tmp)


# ---------------------------------------------------------------- datasets

@contextlib.contextmanager
def replacing_dir(path):
    """A new directory to fill beside `path`; swapped in for the old one when the block ends
    without error (the old one removed only then). On failure the new one is removed and
    the old one is left as it was."""
    path = os.path.abspath(str(path))
    new = new_directory(path)
    try:
        yield new
    except BaseException as exc:
        shutil.rmtree(new, ignore_errors=True)
        if _failed_writing(exc, ()) or (isinstance(exc, OSError) and str(exc.filename or "").startswith(new)):
            raise write_error(path, exc) from None
        raise
    swap_in(new, path)


def new_directory(path) -> str:
    """A new empty directory beside `path`, to be filled then swapped in (swap_in)."""
    new = _temporary_name(str(path))
    try:
        os.mkdir(new)
    except OSError as exc:
        raise write_error(path, exc) from None
    return new


def swap_in(new: str, path: str) -> None:
    """Put the directory `new` in the place of `path`: the old one moved aside, the new one
    renamed in, then the old one removed (a reader sees the old or the new one, except for
    the instant between the two renames)."""
    old = None
    if os.path.lexists(path):
        old = _temporary_name(path) + ".old"
        os.rename(path, old)
    try:
        os.rename(new, path)
    except OSError as exc:
        if old is not None:
            os.rename(old, path)
        shutil.rmtree(new, ignore_errors=True)
        raise write_error(path, exc) from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------- before any work

def check_output(path, flag: str, *, can_stream: bool = True, directory: bool = False) -> None:
    """Refuse, before any work, an output that cannot be written: its directory missing or
    not writable, the output itself a directory (or, for a dataset, a file), `-` where the
    output cannot stream."""
    path = str(path)
    if is_stdout(path):
        if not can_stream:
            raise OutputError(f"{flag} -: this output cannot be written to standard output; name a file")
        return
    if not path:
        raise OutputError(f"{flag}: empty file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        what = "not a directory" if os.path.exists(parent) else "no such directory"
        raise OutputError(f"{path}: {what}: {parent} ({flag})")
    if not os.access(parent, os.W_OK | os.X_OK) or _read_only(parent):
        raise OutputError(f"{path}: directory not writable: {parent} ({flag})")
    if not is_special(path):
        _probe(path, flag)
    if os.path.lexists(path):
        mode = os.stat(path).st_mode if os.path.exists(path) else 0
        if directory and not stat.S_ISDIR(mode):
            raise OutputError(f"{path}: exists and is not a directory ({flag})")
        if not directory and stat.S_ISDIR(mode):
            raise OutputError(f"{path}: is a directory ({flag} names the file to write)")


def _probe(path: str, flag: str) -> None:
    """Create and remove the output's temporary: a directory access() calls writable where no
    file can be made (procfs, sysfs, a file system that refuses root) is refused before the
    work, not after it."""
    try:
        os.remove(_create(path))
    except OutputError as exc:
        raise OutputError(f"{exc} ({flag})") from None
    except OSError:
        pass


def _read_only(directory: str) -> bool:
    """A read-only file system (root's access() says writable there)."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False
