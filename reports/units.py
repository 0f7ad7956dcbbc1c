"""Numbers with their units, the same in the terminal and the HTML."""
from __future__ import annotations


def fmt_ns(ns, micro: str = "us") -> str:
    """A time with its unit (s, ms, us, ns); `micro` spells the microsecond ("µs" in HTML)."""
    if ns is None:
        return ""
    ns = float(ns)
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.1f} {micro}"
    return f"{ns:.0f} ns"
