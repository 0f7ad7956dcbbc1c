"""Streams of chunks: what the streaming layers (block, usb, kernel logs) read their inputs as.

A parser's `Capture.chunks()` yields batches (numpy column dicts or frames) in processing
order; `prefetched` reads the next batches in a worker thread while the caller analyses the
current one, so with passes that release the GIL (scsitrace._native) both cores work.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Iterator, TypeVar

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


def started(first: Iterator[T], again: Callable[[], Iterator[T]]) -> Callable[[], Iterator[T]]:
    """`Capture.chunks` of a parser that began reading in `parse` (so a bad record in the first
    block is raised there): its first block is pulled now; the first call yields it and the
    rest of `first`, any later call a new stream from `again()`."""
    primed = [next(first, None)]

    def chunks() -> Iterator[T]:
        if primed:
            head = primed.pop()
            if head is not None:
                yield head
                yield from first
            return
        yield from again()

    return chunks


def concatenated(chunks: Iterable[dict], columns: dict) -> dict:
    """Chunks of numpy columns as whole columns (`columns`: name -> dtype, for an empty stream)."""
    import numpy as np
    parts = list(chunks)
    return {name: np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, dtype)
            for name, dtype in columns.items()}
