"""Run the `scsitrace` command in this process: exit status, stdout and stderr, with SIGALRM
as the hang detector (a FIFO or /dev/zero read would block or run forever)."""
from __future__ import annotations

import contextlib
import io
import signal

from scsitrace.cli import main

TIMEOUT_S = 240        # a hang (a case takes under a second, but a first run compiles the passes: up to ~1 min)


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so the CLI's internal-error handler lets it through."""


def run_cli(argv: list[str], timeout: int = TIMEOUT_S) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `scsitrace ARGV` run in this process."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise Hang(f"scsitrace {' '.join(argv)} ran more than {timeout} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exc:       # argparse
                status = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return status, out.getvalue(), err.getvalue()


