"""Cross-layer view: the same I/O seen by blktrace (D..C), the kernel's SCSI trace
(dispatch..done), usbmon (CBW..CSW), the emulated bus (selection..final BUS FREE) or, for
USB disks, QEMU's USB mass-storage device model (command received..status sent).

Pure functions on analysed traces (`Analysis` per layer). I/Os are matched by what every
layer records about a command, never by time (each layer has its own clock): direction,
first sector, length in sectors, and the occurrence number of that triple, so a block read
twice is matched twice in order. Commands other than reads and writes (TEST UNIT READY,
SYNCHRONIZE CACHE...) have no block-layer counterpart and are counted, not matched.
"""
from __future__ import annotations

import polars as pl

from scsitrace import scsi

# layer -> (label, what its start and end are)
LAYER_SPANS = {
    "block": ("blktrace", "D", "C"),
    "scsilog": ("ftrace", "disp", "done"),
    "usb": ("usbmon", "CBW", "CSW"),
    "bus": ("QEMU bus", "sel", "free"),
    "device": ("QEMU device", "cmd", "status"),
}
LAYER_ORDER = tuple(LAYER_SPANS)
KEY = ["op", "sector", "sectors", "nth"]


def layer_ios(source, block_bytes: int = 512) -> pl.DataFrame:
    """A layer's read/write I/Os as op, sector, sectors, start_ns, end_ns, abs_start_ns, nth.

    `source` is an Analysis, or a frame of SCSI commands (opcode, lba, blocks, start_ns,
    end_ns) such as qemu_lsi's `device_commands`. SCSI-level LBAs count logical blocks of
    `block_bytes`; the block layer counts 512-byte sectors. The block layer's span is D..C
    (start = C - D2C).
    """
    is_frame = isinstance(source, pl.DataFrame)
    ios = source if is_frame else source.ios
    if not is_frame and source.layer == "block":
        df = ios.filter(pl.col("d2c_ns").is_not_null() & pl.col("end_ns").is_not_null()).select(
            pl.when(pl.col("op").is_in(["read", "write"])).then(pl.col("op")).alias("op"),
            pl.col("lba").alias("sector"), pl.col("blocks").alias("sectors"),
            (pl.col("end_ns") - pl.col("d2c_ns")).alias("start_ns"), "end_ns")
    else:
        per_block = block_bytes // 512
        kinds = {op: scsi.op_kind(op) for op in scsi.READ_OPS | scsi.WRITE_OPS}
        df = ios.filter(pl.col("opcode").is_in(list(kinds)) & pl.col("end_ns").is_not_null()).select(
            pl.col("opcode").cast(pl.Int64).replace_strict(kinds, return_dtype=pl.Utf8).alias("op"),
            (pl.col("lba") * per_block).alias("sector"), (pl.col("blocks") * per_block).alias("sectors"),
            "start_ns", "end_ns")
    origin = 0 if is_frame or not source.capture else (source.capture.meta.get("origin_ns") or 0)
    return df.filter(pl.col("op").is_not_null() & pl.col("start_ns").is_not_null()).sort("start_ns").with_columns(
        (pl.col("start_ns") + origin).alias("abs_start_ns"),
        pl.int_range(pl.len()).over(["op", "sector", "sectors"]).alias("nth"),
    )


def match(analyses: dict[str, object], block_bytes: int = 512) -> tuple[pl.DataFrame, dict]:
    """One row per I/O seen at every given layer, plus per-layer counts.

    Columns: io, op, sector, sectors, then per layer `<layer>_start_us` (from that layer's
    first matched I/O, on its own clock), `<layer>_dur_us`; and `d_to_dispatch_us` (blktrace D
    to ftrace dispatch), when both are present: they share the guest's monotonic clock.
    """
    frames = {layer: layer_ios(analyses[layer], block_bytes) for layer in LAYER_ORDER if layer in analyses}
    layers = [layer for layer, f in frames.items() if f.height]   # a layer without I/Os matches nothing
    out = None
    for layer in layers:
        f = frames[layer].select(*KEY, pl.col("start_ns").alias(f"{layer}_s"), pl.col("end_ns").alias(f"{layer}_e"),
                                 pl.col("abs_start_ns").alias(f"{layer}_abs"))
        out = f if out is None else out.join(f, on=KEY, how="inner")
    counts = {layer: {"ios": frames[layer].height, "matched": 0, "unmatched": frames[layer].height,
                      "other_commands": _height(analyses[layer]) - frames[layer].height} for layer in frames}
    if out is None:
        return pl.DataFrame(), counts
    first = layers[0]
    out = out.sort(f"{first}_s")
    cols = [pl.int_range(pl.len()).alias("io"), "op", "sector", "sectors"]
    for layer in layers:
        cols.append(((pl.col(f"{layer}_s") - pl.col(f"{layer}_s").min()) / 1000).alias(f"{layer}_start_us"))
        cols.append(((pl.col(f"{layer}_e") - pl.col(f"{layer}_s")) / 1000).alias(f"{layer}_dur_us"))
    if "block" in layers and "scsilog" in layers:
        cols.append(((pl.col("scsilog_abs") - pl.col("block_abs")) / 1000).alias("d_to_dispatch_us"))
    table = out.select(cols)
    for layer in layers:
        counts[layer]["matched"] = table.height
        counts[layer]["unmatched"] = counts[layer]["ios"] - table.height
    return table, counts


def _height(source) -> int:
    return source.height if isinstance(source, pl.DataFrame) else source.ios.height


def summary(table: pl.DataFrame, counts: dict) -> dict:
    """Per layer: matched/unmatched counts and the median, min and max duration (us)."""
    out = {}
    for layer, c in counts.items():
        col = f"{layer}_dur_us"
        d = table[col] if table.height and col in table.columns else pl.Series([], dtype=pl.Float64)
        label, start, end = LAYER_SPANS[layer]
        out[layer] = {**c, "label": label, "span": f"{start}..{end}",
                      "median_us": d.median(), "min_us": d.min(), "max_us": d.max()}
    return out


def rich_table(table: pl.DataFrame, counts: dict, limit: int | None = 40):
    """The side-by-side table for the terminal (rich)."""
    from rich.table import Table
    layers = [layer for layer in LAYER_ORDER if f"{layer}_dur_us" in table.columns]
    t = Table(title="The same I/O at each layer, us: X@ = start from the layer's first I/O "
              "(its own clock), X..Y = duration", title_justify="left")
    for col in ("#", "op", "sector", "n"):
        t.add_column(col, justify="right")
    for layer in layers:
        label, start, end = LAYER_SPANS[layer]
        t.add_column(f"{start}@", justify="right")
        t.add_column(f"{start}..{end}", justify="right")
    has_gap = "d_to_dispatch_us" in table.columns
    if has_gap:
        t.add_column("D->disp", justify="right")
    rows = table if limit is None else table.head(limit)
    for r in rows.iter_rows(named=True):
        cells = [str(r["io"]), r["op"], str(r["sector"]), str(r["sectors"])]
        for layer in layers:
            cells += [f"{r[f'{layer}_start_us']:.0f}", f"{r[f'{layer}_dur_us']:.1f}"]
        if has_gap:
            cells.append(f"{r['d_to_dispatch_us']:.1f}")
        t.add_row(*cells)
    if limit is not None and table.height > limit:
        t.caption = f"first {limit} of {table.height} I/Os (--all shows every one)"
    return t


def rich_summary(summ: dict):
    from rich.table import Table
    t = Table(title="Per layer", title_justify="left")
    for col in ("layer", "span", "I/Os", "matched", "unmatched", "other", "median us", "min us", "max us"):
        t.add_column(col, justify="right" if col not in ("layer", "span") else "left")
    fmt = lambda v: "" if v is None else f"{v:.1f}"  # noqa: E731
    for s in summ.values():
        t.add_row(s["label"], s["span"], str(s["ios"]), str(s["matched"]), str(s["unmatched"]),
                  str(s["other_commands"]), fmt(s["median_us"]), fmt(s["min_us"]), fmt(s["max_us"]))
    return t
