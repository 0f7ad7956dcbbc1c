"""The HTML report's readable tables: headline figures (human labels and units, never raw
JSON keys), per device / per target rows, the latency percentiles, and the layer's own
tables (stages, processes, SRT, ...) with column names and units a person reads, long
tables cut to their first MAX_ROWS rows (the JSON has them all).

Every cell still carries its raw JSON value in data-value (see html_page.table)."""
from __future__ import annotations


from .html_page import esc, fmt_ns, table

MAX_ROWS = 30

HEADERS = {"ios_completed": "I/Os", "ios": "I/Os", "n": "count", "min_ns": "min", "avg_ns": "avg",
           "max_ns": "max", "total_ns": "total", "p50_ns": "p50", "p90_ns": "p90", "p99_ns": "p99",
           "p999_ns": "p99.9", "mib_s": "MB/s", "bandwidth_mib_s": "MB/s", "iops": "IOPS",
           "busy_percent": "busy %", "busy_ns": "busy", "data_bytes": "data", "bytes": "data",
           "bytes_max": "size up to", "avg_response_ns": "avg response", "q2c_avg_ns": "Q2C avg",
           "q2c_max_ns": "Q2C max", "d2c_avg_ns": "D2C avg", "seek_mean_sectors": "seek mean (sectors)",
           "seek_median_sectors": "seek median (sectors)", "avg_depth": "avg depth", "max_depth": "max depth",
           "reads_other": "reads/other", "name": "name", "le_ns": "at most", "opcode": "opcode",
           "normalized_ns": "per I/O", "percent": "share"}


def fmt_bytes(v) -> str:
    if v is None:
        return ""
    v = float(v)
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(v) >= size:
            return f"{v / size:.2f} {unit}"
    return f"{v:.0f} B"


def fmt_plain(v) -> str:
    """A number as a person reads it: thousands separators, no exponent."""
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a == 0:
        return "0"
    return f"{v:.3g}"


def formatter(col: str, key: str = ""):
    if col.endswith("_ns"):
        return fmt_ns
    if col in ("bytes", "data_bytes", "bytes_max"):
        return fmt_bytes
    if "percent" in col or col == "percent" or key == "overhead" and col != "device":
        return lambda v: "" if v is None else f"{v:.2f} %"
    if col in ("mib_s", "bandwidth_mib_s"):
        return lambda v: "" if v is None else f"{v:.2f}"
    if col == "iops":
        return lambda v: "" if v is None else f"{v:.1f}"
    if col == "opcode":
        return lambda v: "" if v is None else f"0x{v:02x}"
    return fmt_plain


def header(col: str) -> str:
    if col in HEADERS:
        return HEADERS[col]
    return col[:-3].replace("_", " ") if col.endswith("_ns") else col.replace("_", " ")


def wrap(markup: str) -> str:
    """A table in a box that scrolls sideways instead of widening the page."""
    return f"<div class=\"tw\">{markup}</div>"


def readable(tid: str, key: str, rows: list[dict], first: list[str] = (), names: dict | None = None) -> str:
    """A table of JSON rows with readable headers and units; columns null in every row left
    out; at most MAX_ROWS rows (a note says how many the JSON has)."""
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    cols = [c for c in cols if any(r.get(c) is not None for r in rows)]
    cols = [c for c in first if c in cols] + [c for c in cols if c not in first]
    shown = rows[:MAX_ROWS]
    names = names or {}
    out = wrap(table(tid, key, [(names.get(c) or header(c), c, formatter(c, key)) for c in cols], shown))
    if len(rows) > len(shown):
        out += f"<p class=\"note\">First {len(shown)} of {len(rows)} rows; the JSON output has them all.</p>"
    return out


def headline(summary: dict) -> list[dict]:
    """The headline figures: label, value shown, raw value, the JSON key it comes from."""
    items = [("Elapsed", fmt_ns(summary.get("elapsed_ns")), summary.get("elapsed_ns"), "elapsed_ns"),
             ("I/Os completed", fmt_plain(summary.get("ios_completed")), summary.get("ios_completed"),
              "ios_completed"),
             ("Data", "unknown" if summary.get("data_bytes") is None else fmt_bytes(summary.get("data_bytes")),
              summary.get("data_bytes"), "data_bytes")]
    bw = summary.get("bandwidth_mib_s")
    items.append(("Bandwidth", "unknown" if bw is None else f"{bw:.2f} MB/s", bw, "bandwidth_mib_s"))
    iops = summary.get("iops")
    items.append(("IOPS", "" if iops is None else f"{iops:,.1f} I/Os/s", iops, "iops"))
    lat = [r for r in summary.get("latency") or [] if r.get("n")]
    if lat:
        r = lat[0]
        name = "response" if r["name"] == "response" else r["name"]
        for col, p in (("p50_ns", "p50"), ("p90_ns", "p90"), ("p99_ns", "p99"), ("p999_ns", "p99.9")):
            if r.get(col) is not None:
                items.append((f"{name} {p}", fmt_ns(r[col]), r[col], f"latency.{r['name']}.{col}"))
    return [{"label": a, "shown": b, "value": c, "key": d} for a, b, c, d in items]


def headline_markup(summary: dict) -> str:
    import json
    cards = "".join(f"<div class=\"card\" data-key=\"{esc(h['key'])}\" data-value=\"{esc(json.dumps(h['value']))}\">"
                    f"<div class=\"v\">{esc(h['shown'])}</div><div class=\"l\">{esc(h['label'])}</div></div>"
                    for h in headline(summary))
    return f"<div class=\"cards\" id=\"headline\">{cards}</div>"


def latency_rows(summary: dict) -> list[dict]:
    return [r for r in summary.get("latency") or []]
