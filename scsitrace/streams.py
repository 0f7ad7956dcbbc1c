"""Streams of chunks: what the streaming layers (block, usb, kernel logs) read their inputs as.

A parser's `Capture.chunks()` yields batches (numpy column dicts or frames) in processing
order; `prefetched` reads the next batches in a worker thread while the caller analyses the
current one, so with passes that release the GIL (scsitrace._native) both cores work.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


def prefetched(chunks: Iterable[T], depth: int = 2) -> Iterator[T]:
    """The chunks, produced up to `depth` ahead in a worker thread; an exception raised while
    producing is raised here, at the chunk where it happened. Memory: depth + 2 chunks."""
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for chunk in chunks:
                if stop.is_set():
                    return
                slots.put((chunk, None))
        except BaseException as exc:   # handed to the consumer, raised there
            slots.put((None, exc))
            return
        slots.put((_DONE, None))

    worker = threading.Thread(target=produce, name="scsitrace-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            chunk, exc = slots.get()
            if exc is not None:
                raise exc
            if chunk is _DONE:
                return
            yield chunk
    finally:
        stop.set()
        while worker.is_alive():    # unblock a producer waiting for a free slot
            try:
                slots.get_nowait()
            except queue.Empty:
                worker.join(0.01)
