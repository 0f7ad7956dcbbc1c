"""SIGINT and SIGTERM end a command cleanly: the signal becomes `Interrupted` (a
KeyboardInterrupt) raised in the main thread, so every `finally` and every output
transaction runs (temporaries removed, workers stopped, a batch's dataset of what finished
written), and the CLI exits 128 + the signal's number (130, 143), without a traceback.

`deferred()` holds a signal back while a step that must not be cut in half runs (a result
being added to a dataset); it is raised when the step ends.
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The command was asked to stop by a signal."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


_state = {"deferring": 0, "pending": None}


def _handler(signum, frame):
    if _state["deferring"]:
        _state["pending"] = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def stopping_cleanly():
    """SIGINT/SIGTERM raise Interrupted while the block runs (main thread only; elsewhere,
    or where a caller installed its own handlers, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in SIGNALS}
    mine = [s for s in SIGNALS if old[s] in (signal.SIG_DFL, signal.default_int_handler)]
    for s in mine:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s in mine:
            signal.signal(s, old[s])


@contextlib.contextmanager
def deferred():
    """A signal arriving inside the block is raised when the block ends."""
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        pending, _state["pending"] = _state["pending"], None
        if pending is not None and not _state["deferring"]:
            raise Interrupted(pending)
        if pending is not None:
            _state["pending"] = pending


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM."""
    return getattr(exc, "exit_status", 128 + signal.SIGINT)
