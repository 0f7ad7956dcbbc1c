"""What-if sweeps: `simulate --sweep PARAM=v1,v2,... --workload NAME`.

For each value the workload is simulated (level 1, control lines: all the phase tables need),
the trace analysed with the raid1990 profile, and one row kept: bandwidth, I/O rate and the
phase shares. `PARAMS` lists what can be swept; each entry parses a value and applies it to
the (Workload, Params) pair, so a sweep changes exactly one mechanism.
"""
from __future__ import annotations

import re
from dataclasses import replace

from scsitrace.errors import UsageError

from .params import US, parse_ratio, parse_size
from .workloads import measure, run_one


def _on_off(v: str) -> bool:
    if v.lower() in ("on", "yes", "true", "1"):
        return True
    if v.lower() in ("off", "no", "false", "0"):
        return False
    raise ValueError(v)


def _ratio(option):
    def parse(v):
        return parse_ratio(v, option, 32 * 1024)
    return parse


def _size(v):
    return parse_size(v)


def _choice(*names):
    def parse(v):
        if v not in names:
            raise ValueError(v)
        return v
    return parse


def _bus_rate(wl, p, v):
    tick = p.bus.tick_ns
    return wl, replace(p, bus=replace(p.bus, byte_ns=max(2 * tick, round(1000 / v / tick) * tick)))


def _alloc_us(wl, p, v):
    return wl, replace(p, hba=replace(p.hba, alloc_pause_ns=(int(v * US), int(v * US)), alloc_fixed=True))


# name -> (what, parse text -> value, apply (wl, params, value) -> (wl, params))
PARAMS = {
    "disks": ("disks on the string", int, lambda wl, p, v: (replace(wl, disks=v), p)),
    "size": ("request size (512 B multiples)", _size, lambda wl, p, v: (replace(wl, size=v), p)),
    "op": ("read or write", _choice("read", "write"), lambda wl, p, v: (replace(wl, op=v), p)),
    "pattern": ("seq or random", _choice("seq", "random"), lambda wl, p, v: (replace(wl, pattern=v), p)),
    "processes": ("host processes per disk", int, lambda wl, p, v: (replace(wl, processes=v), p)),
    "inflight": ("tagged commands in flight per disk", int, lambda wl, p, v: (replace(wl, inflight=v), p)),
    "seed": ("random seed", int, lambda wl, p, v: (replace(wl, seed=v), p)),
    "duration": ("seconds of bus time", float,
                 lambda wl, p, v: (replace(wl, duration_ns=int(round(v * 1e9 / 50)) * 50, count=None), p)),
    "host": ("no-copy or user-level", _choice("no-copy", "user-level"),
             lambda wl, p, v: (wl, replace(p, host=replace(p.host, mode=v)))),
    "bfr": ("Buffer Full Ratio (1/2, 512B, 16K, 0-255)", _ratio("bfr"),
            lambda wl, p, v: (wl, replace(p, disk=replace(p.disk, bfr=v)))),
    "ber": ("Buffer Empty Ratio", _ratio("ber"), lambda wl, p, v: (wl, replace(p, disk=replace(p.disk, ber=v)))),
    "readahead": ("disk readahead on/off", _on_off,
                  lambda wl, p, v: (wl, replace(p, disk=replace(p.disk, readahead=v)))),
    "bus_rate": ("synchronous transfer rate, MB/s (4 = 250 ns per byte)", float, _bus_rate),
    "alloc_pauses": ("the Jaguar's 8 KB buffer-allocation pauses on/off", _on_off,
                     lambda wl, p, v: (wl, replace(p, hba=replace(p.hba, alloc_pauses=v)))),
    "alloc_pause_us": ("every 8 KB allocation pause fixed at this many us", float, _alloc_us),
    "min_seek_ms": ("track-to-track seek time (assumption A8)", float,
                    lambda wl, p, v: (wl, replace(p, disk=replace(p.disk, min_seek_ns=int(v * 1e6))))),
    "setup_in_command": ("a read that needs no disconnect sets up its data in COMMAND (A5) on/off", _on_off,
                         lambda wl, p, v: (wl, replace(p, disk=replace(p.disk, setup_in_command=v)))),
    "timelines": ("use the experiment's own Sec 4.7 timeline row on/off", _on_off,
                  lambda wl, p, v: (wl, replace(p, host=replace(p.host, timelines=v)))),
    "one_cpu": ("host work of all processes on one CPU on/off", _on_off,
                lambda wl, p, v: (wl, replace(p, host=replace(p.host, one_cpu=v)))),
}

CATEGORIES = ("Arbitration", "Selection", "Command", "Message Out", "Message In", "Data Transfer",
              "Disconnect/Reconnect", "Reselection", "Status", "Bus Free")


def column(category: str) -> str:
    return re.sub(r"[^a-z]+", "_", category.lower()).strip("_") + "_pct"


def parse_spec(spec: str) -> tuple[str, list[str], list]:
    """'PARAM=v1,v2' -> (PARAM, texts, values); a UsageError names what is wrong."""
    name, sep, rest = spec.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not rest.strip():
        raise UsageError(f"--sweep: expected PARAM=v1,v2,..., got {spec!r}")
    if name not in PARAMS:
        raise UsageError(f"--sweep: unknown parameter {name!r}; one of {', '.join(sorted(PARAMS))}")
    texts = [t.strip() for t in rest.split(",") if t.strip()]
    values = []
    for t in texts:
        try:
            values.append(PARAMS[name][1](t))
        except (ValueError, UsageError):
            raise UsageError(f"--sweep {name}: bad value {t!r} ({PARAMS[name][0]})") from None
    return name, texts, values


def row(param: str, text: str, res, s: dict) -> dict:
    m = measure(s, res.ios, res.end_ns)
    out = {"param": param, "value": text, "elapsed_s": res.end_ns / 1e9,
           "ios_completed": int(s["ios_completed"]), "bandwidth_mib_s": round(m["mib_s"], 4),
           "iops": round(m["iops"], 2)}
    pct = {c["name"]: c["percent"] for c in s["categories"]}
    for c in CATEGORIES:
        out[column(c)] = round(float(pct.get(c, 0.0)), 4)
    return out


def sweep(wl, params, spec: str, level: int = 1, progress=None) -> list[dict]:
    name, texts, values = parse_spec(spec)
    rows = []
    for text, value in zip(texts, values):
        w, p = PARAMS[name][2](wl, params, value)
        res, s = run_one(w, p, level)
        rows.append(row(name, text, res, s))
        if progress:
            progress(rows[-1])
    return rows
