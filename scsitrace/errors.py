"""The project's error tree: one root, a few kinds, each shown as one clear line.

Exit statuses (CLI contract): 0 ok, 1 internal error or regression, 2 bad input or usage.
"""
from __future__ import annotations


class ScsitraceError(Exception):
    """Root of every error the project raises on purpose."""

    exit_status = 2


class UsageError(ScsitraceError):
    """The command line asks for something that cannot be done."""


class BadInput(ScsitraceError):
    """A malformed record: names the file and the line (text) or byte offset (binary)."""

    def __init__(self, path, reason: str, *, line: int | None = None,
                 offset: int | None = None, text: str | None = None):
        self.path = str(path)
        self.reason = reason
        self.line = line
        self.offset = offset
        self.text = text
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
        elif self.offset is not None:
            where += f": byte offset {self.offset}"
        msg = f"{where}: {self.reason}"
        if self.text is not None:
            shown = self.text if len(self.text) <= 80 else self.text[:77] + "..."
            msg += f": {shown!r}"
        return msg


class TruncatedInput(BadInput):
    """The input ends inside a record ("short", as opposed to "wrong")."""


class MissingSignal(ScsitraceError):
    """A signal the analysis cannot do without is absent from the capture."""


class UnknownFormat(ScsitraceError):
    """No parser recognises the file."""
