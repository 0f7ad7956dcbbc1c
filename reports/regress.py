"""Regression gate: a trace's figures saved as a baseline, later compared within tolerances.

A figure has a name, a value and a kind that sets its default tolerance and which way is
worse:

| kind     | figures                                            | default   | worse when |
|----------|----------------------------------------------------|-----------|------------|
| percent  | `percent.<category>` (share of elapsed time)       | +-1 point | any change (a share moving is the signal) |
| time     | `normalized_ns.<category>`, `response_ns.*`, `attribution.*_ns` | +-10 % | higher |
| rate     | `bandwidth_mib_s`, `iops`                          | +-5 %     | lower |

Outside its tolerance a figure is "regressed" (worse, or a directionless change) or
"improved" (better: passes, with a hint to --update). Tolerances are overridable per figure
name, per glob (`percent.*`) or per kind: `NAME=VALUE`, VALUE absolute in the figure's unit
(points, ns, MiB/s) or relative with a % sign.
"""
from __future__ import annotations

import fnmatch
import json
import os

import numpy as np

from scsitrace import outputs
from scsitrace.errors import BadInput, UsageError

FORMAT = "scsitrace-baseline"
VERSION = 1
DEFAULT_TOLERANCE = {"percent": ("abs", 1.0), "time": ("rel", 0.10), "rate": ("rel", 0.05)}
UNIT = {"percent": " pt", "time": " ns", "rate": ""}
WORSE = {"percent": 0, "time": +1, "rate": -1}   # 0: any change beyond tolerance is a regression


def figures(summary: dict, attribution: dict | None = None) -> dict:
    """name -> {"value", "kind"} from the summary dict (and attribution): the percentage table,
    the rates, and the response time of the layer's first latency row (bus, usb, kernel logs:
    the I/O response; block: Q2C) as the latency table has it (nearest-rank percentiles)."""
    out: dict[str, dict] = {}
    for c in summary.get("categories", []):
        out[f"percent.{c['name']}"] = {"value": c["percent"], "kind": "percent"}
        if c.get("normalized_ns") is not None:
            out[f"normalized_ns.{c['name']}"] = {"value": c["normalized_ns"], "kind": "time"}
    for key in ("bandwidth_mib_s", "iops"):
        if summary.get(key) is not None:
            out[key] = {"value": summary[key], "kind": "rate"}
    response = next(iter(summary.get("latency") or []), None)
    if response and response.get("n"):
        for name, col in (("mean", "avg_ns"), ("median", "p50_ns"), ("p95", "p95_ns")):
            if response.get(col) is not None:
                out[f"response_ns.{name}"] = {"value": float(response[col]), "kind": "time"}
    if attribution and attribution.get("available"):
        for key, v in attribution["totals"].items():
            if v is not None:
                out[f"attribution.{key}"] = {"value": v, "kind": "time"}
    return out


PERCENTILES = "nearest-rank"     # how response_ns.median/p95 are computed (baselines say it)
# baselines written before they said it computed those two with numpy's interpolation
INTERPOLATED = ("response_ns.median", "response_ns.p95")


def make_baseline(trace: str, options: dict, figs: dict, baseline_path: str) -> dict:
    """The baseline document; the trace path is stored relative to the baseline file."""
    rel = os.path.relpath(os.path.abspath(trace), os.path.dirname(os.path.abspath(baseline_path)))
    return {"format": FORMAT, "version": VERSION, "percentiles": PERCENTILES, "trace": rel, "options": options,
            "figures": figs}


def write_baseline(path: str, doc: dict) -> None:
    with outputs.writing(path) as fh:
        json.dump(doc, fh, indent=1, sort_keys=False)
        fh.write("\n")


def read_baseline(path: str) -> dict:
    from scsitrace.inputcheck import BASELINE_BYTES, read_regular
    try:
        doc = json.loads(read_regular(path, BASELINE_BYTES, "JSON baseline").decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise BadInput(path, f"not a JSON baseline: {exc.msg}", line=exc.lineno) from None
    except UnicodeDecodeError:
        raise BadInput(path, "not a JSON baseline (not UTF-8 text)") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInput(path, f"not a scsitrace baseline (no \"format\": \"{FORMAT}\"); "
                             "write one with `scsitrace baseline TRACE -o FILE`")
    if doc.get("version") != VERSION:
        raise BadInput(path, f"baseline version {doc.get('version')!r} is not supported (expected {VERSION})")
    figs = doc.get("figures")
    if not isinstance(figs, dict) or not all(
            isinstance(f, dict) and f.get("kind") in DEFAULT_TOLERANCE
            and (f.get("value") is None or isinstance(f.get("value"), (int, float))) for f in figs.values()):
        raise BadInput(path, "baseline figures must map names to {\"value\": number, \"kind\": "
                             "percent|time|rate}")
    if doc.get("percentiles") != PERCENTILES:
        for name in INTERPOLATED:
            if name in figs:
                figs[name] = {**figs[name], "stale": True}
    return doc


def parse_tolerances(items: list[str]) -> list[tuple[str, str, float]]:
    """['percent=2', 'response_ns.*=20%'] -> [(pattern, 'abs'|'rel', value)]."""
    out = []
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"--tolerance expects NAME=VALUE (e.g. percent=2 or bandwidth_mib_s=5%), got {item!r}")
        value = value.strip()
        mode = "rel" if value.endswith("%") else "abs"
        try:
            number = float(value.rstrip("%"))
        except ValueError:
            raise UsageError(f"--tolerance {item!r}: {value!r} is not a number") from None
        if number < 0:
            raise UsageError(f"--tolerance {item!r}: must not be negative")
        if number != number:                  # NaN compares false with everything: no verdict at all
            raise UsageError(f"--tolerance {item!r}: {value!r} is not a number")
        out.append((name.strip(), mode, number / 100 if mode == "rel" else number))
    return out


def tolerance_for(name: str, kind: str, overrides: list[tuple[str, str, float]]) -> tuple[str, float]:
    """The last matching override wins (name, glob or kind); else the kind's default."""
    chosen = DEFAULT_TOLERANCE[kind]
    for pattern, mode, value in overrides:
        if pattern == kind or pattern == name or fnmatch.fnmatchcase(name, pattern):
            chosen = (mode, value)
    return chosen


def compare(baseline: dict, current: dict, overrides: list[tuple[str, str, float]]) -> list[dict]:
    """One row per figure: baseline, current, delta, allowed, verdict."""
    rows = []
    for name in list(baseline) + [n for n in current if n not in baseline]:
        b, c = baseline.get(name), current.get(name)
        kind = (b or c)["kind"]
        mode, tol = tolerance_for(name, kind, overrides)
        bv = None if b is None else b["value"]
        cv = None if c is None else c["value"]
        row = {"figure": name, "kind": kind, "baseline": bv, "current": cv, "delta": None,
               "tolerance": f"{tol * 100:g} %" if mode == "rel" else f"{tol:g}{UNIT[kind]}", "verdict": "ok"}
        if b is not None and b.get("stale"):    # an interpolated percentile: not comparable, never failing
            row.update(verdict="stale", delta=None if bv is None or cv is None else cv - bv)
            rows.append(row)
            continue
        if bv is None or cv is None:
            row["verdict"] = "new" if bv is None and cv is not None else "missing" if cv is None and bv is not None else "ok"
            rows.append(row)
            continue
        delta = cv - bv
        row["delta"] = delta
        allowed = tol * abs(bv) if mode == "rel" else tol
        if abs(delta) > allowed + 1e-9 * max(abs(bv), 1.0):
            direction = WORSE[kind]
            row["verdict"] = "regressed" if direction == 0 or np.sign(delta) == direction else "improved"
        rows.append(row)
    return rows


def failed(rows: list[dict]) -> bool:
    """Regressed figures, and figures the baseline had that the trace no longer gives."""
    return any(r["verdict"] in ("regressed", "missing") for r in rows)
