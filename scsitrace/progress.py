"""Progress bars on long reads (only on a terminal, never in pipes or CI logs)."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

BIG_FILE = 64 << 20


@contextmanager
def progress_for(path: str):
    """Yields a callback `advance(nbytes)` or None when no bar is wanted."""
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    if size < BIG_FILE or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn
    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), transient=True,
                  console=__import__("rich.console").console.Console(stderr=True)) as bar:
        task = bar.add_task(os.path.basename(path), total=size)
        yield lambda n: bar.advance(task, n)


@contextmanager
def progress_of(description: str, total: float, unit: str, stream=None):
    """A bar for work measured in `unit` (bus seconds, I/Os): yields `update(done)` (the
    amount done so far), or None when stderr is not a terminal."""
    stream = stream or sys.stderr
    if not total or not stream.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    columns = ["[progress.description]{task.description}", BarColumn()]
    columns.append(MofNCompleteColumn() if unit == "I/Os" else
                   TextColumn(f"{{task.completed:.2f}}/{{task.total:.2f}} {unit}"))
    with Progress(*columns, TimeRemainingColumn(), transient=True, console=Console(file=stream)) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=min(done, total))
