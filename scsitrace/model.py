"""What parsers hand to the core (`Capture`) and what the core hands to reports (`Analysis`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import polars as pl

from . import schema

MAX_EXAMPLES = 5
# Per-I/O rows a streaming layer (block, usb, kernel logs) keeps for the reports; beyond it
# they are evenly thinned over the whole trace (a note says so), and `--ios` gets them all
# as they are produced (Options.ios_sink).
KEEP_IOS = 1 << 20


@dataclass
class RecordCount:
    """Every input record is parsed, skipped (with a reason) or flagged: nothing is lost."""

    read: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)  # first few skipped, "file:line: why"

    def skip(self, n: int, examples: list[str]) -> None:
        self.skipped += n
        room = MAX_EXAMPLES - len(self.examples)
        if room > 0:
            self.examples.extend(examples[:room])

    def as_json(self) -> dict:
        return {"read": self.read, "skipped": self.skipped, "skipped_examples": list(self.examples)}


class LazyFrames(dict):
    """A `Capture.frames` dict whose frames are built on first access (from numpy columns
    that the analysis reads directly, so the frame costs nothing unless someone asks)."""

    def __init__(self, builders: dict[str, Callable[[], pl.DataFrame]]):
        super().__init__()
        self._builders = dict(builders)

    def __missing__(self, key: str) -> pl.DataFrame:
        if key not in self._builders:
            raise KeyError(key)
        frame = self[key] = self._builders.pop(key)()
        return frame

    def _build_all(self) -> None:
        for key in list(self._builders):
            self[key]

    def __contains__(self, key) -> bool:
        return super().__contains__(key) or key in self._builders

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):
        self._build_all()
        return super().__iter__()

    def __len__(self) -> int:
        return super().__len__() + len(self._builders)

    def keys(self):
        self._build_all()
        return super().keys()

    def values(self):
        self._build_all()
        return super().values()

    def items(self):
        self._build_all()
        return super().items()


@dataclass
class Capture:
    """A parsed input. `layer` picks the core analysis: bus, block, usb or scsilog.

    Bus captures stream: `chunks()` yields `transitions` frames in time order, and
    `records` fills in as they are consumed. Other layers put their frames in `frames`;
    a layer may also hand over numpy `columns` that its analysis reads instead (block: the
    reader's event columns).
    """

    layer: str
    path: str
    format: str
    meta: dict = field(default_factory=dict)
    records: RecordCount = field(default_factory=RecordCount)
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    columns: dict[str, object] = field(default_factory=dict)  # numpy columns a layer reads instead
    anomalies: pl.DataFrame = field(default_factory=lambda: schema.empty(schema.ANOMALIES))
    chunks: Callable[[], Iterator[pl.DataFrame]] | None = None
    notes: list[str] = field(default_factory=list)

    def transitions(self) -> pl.DataFrame:
        """All transitions at once (tests, small traces); analysis uses `chunks`."""
        parts = list(self.chunks()) if self.chunks else []
        if not parts:
            return schema.empty(schema.TRANSITIONS)
        return pl.concat(parts)


@dataclass
class Analysis:
    """One analysed trace: canonical tables plus what the reports need to explain them.

    `category_order` maps a profile name to its categories in report order; segments
    carry `phase` (profile `scsi`) and `category` (the layer's own buckets). A layer
    whose time does not tile (block, usb) may instead hand over `categories` directly:
    profile -> percentage table (scsitrace/tables.py CATEGORIES). `tables` holds the
    layer's own tables, each declared in `declared` (scsitrace/tables.py `Table`: schema,
    JSON key and shape); a table may be handed over as a function that builds it on first
    read. `no_normalized`: categories that get no time per I/O (idle time: I/Os overlap).
    """

    layer: str
    capture: Capture
    elapsed_ns: int
    start_ns: int
    segments: pl.DataFrame
    ios: pl.DataFrame
    anomalies: pl.DataFrame
    ios_completed: int
    data_bytes: int | None
    category_order: dict[str, list[str]]
    default_profile: str
    categories: dict[str, pl.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    segment_targets: bool | None = None         # whether segments name targets (None: look at them)
    source: dict = field(default_factory=dict)
    declared: tuple = ()                        # the layer's Table declarations, in JSON order
    tables: dict = field(default_factory=dict)  # name -> frame (or a function building it)
    no_normalized: tuple = ()
    filters: dict = field(default_factory=dict)  # the filters applied, as the user gave them
    runs: pl.DataFrame | None = None            # bus: the reduced phase runs (attribution)
    ios_streamed: bool = False                  # every per-I/O row went to Options.ios_sink

    def table(self, name: str) -> pl.DataFrame:
        """A declared table, built on first read, checked against its declaration."""
        value = self.tables[name]
        if callable(value):
            value = self.tables[name] = self._checked(name, value())
        return value

    def _checked(self, name: str, frame: pl.DataFrame) -> pl.DataFrame:
        from .tables import check
        spec = next((t for t in self.declared if t.name == name), None)
        if spec is None:
            raise KeyError(f"{self.layer} analysis: table {name!r} is not declared")
        return check(spec, frame)

    def __post_init__(self):
        for name, value in self.tables.items():
            if not callable(value):
                self.tables[name] = self._checked(name, value)


def _built_on_demand(name: str) -> property:
    """An Analysis field that a layer may set to a zero-argument function instead of a frame:
    the frame is built, once, when first read (the summary and the JSON do not read every
    table; a 1 M-row table nobody reads should cost nothing)."""
    slot = "_" + name

    def get(self):
        value = self.__dict__[slot]
        if callable(value):
            value = self.__dict__[slot] = value()
        return value

    def set(self, value):
        self.__dict__[slot] = value

    return property(get, set)


for _name in ("segments", "ios"):
    setattr(Analysis, _name, _built_on_demand(_name))
