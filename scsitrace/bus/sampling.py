"""Sample-rate honesty: what a sampled capture (sigrok, DSView, Saleae) could not resolve.

A logic analyzer places every edge to within one sample period. The bus analysis needs two
things the period may be too coarse for:
- the settle delay (`--settle-ns`, 400 ns): states shorter than it are line skew. With fewer
  than two samples in it, skew cannot be told from a short phase, so the skew merging and
  the times of the short phases are uncertain;
- REQ/ACK handshakes: bytes are counted, and command/status/message bytes latched, at REQ
  and ACK edges. A REQ or ACK pulse one sample long, or a REQ and an ACK edge in the same
  sample, means handshakes may have been merged or missed (a handshake that fell between
  two samples leaves no trace at all: the pulses that did show are the evidence).
One-sample pulses on any line (glitches) are counted and the first few shown: at the
capture's period they are noise or real pulses shorter than two periods, and the reader
cannot tell which.

The reader leaves its counts in `capture.meta` (`parsers/_samples.py`); `review` turns them
into notes and the `sampling` block of the JSON `source`.
"""
from __future__ import annotations

SHORT_PHASES = ["Arbitration", "Selection", "Reselection", "Message Out", "Command", "Status",
                "Message In", "Disconnect/Reconnect"]
HANDSHAKE_FIGURES = ["data_bytes", "bandwidth_mib_s", "command names and CDB fields (ios)",
                     "status and message bytes", "attribution REQ/ACK times"]


def _ns(value) -> str:
    """A time in engineering units (2.06157e+09 ns reads 2.061570 s)."""
    if value is None:
        return "unknown"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.6g} {unit}"
    return f"{value:g} ns"


def review(meta: dict, settle_ns: int) -> tuple[dict | None, list[str]]:
    """(the `sampling` JSON block, notes) for a sampled capture; (None, []) for others."""
    if "sample_period_known" not in meta:
        return None, []
    period = meta.get("sample_period_ns")
    known = bool(meta.get("sample_period_known"))
    signals = set(meta.get("signals", ()))
    glitches = meta.get("glitches", {})
    notes: list[str] = []
    affected: list[str] = []
    rate = f" ({meta['samplerate']})" if meta.get("samplerate") else ""
    if known:
        notes.append(f"sample period {_ns(period)}{rate}: every edge time is known to within one period")
    else:
        notes.append(f"the file gives no sample rate: sample period estimated as {_ns(period)}, the smallest "
                     "interval between two rows (the true period is at most that)")
    settle_ok = period is not None and 2 * period <= settle_ns
    if period is not None and not settle_ok:
        affected += ["skew_merged"] + SHORT_PHASES
        notes.append(f"the sample period ({_ns(period)}) is too coarse to resolve the settle delay ({settle_ns} ns, "
                     f"which needs a period of at most {settle_ns / 2:g} ns): line skew cannot be told from a "
                     f"short phase. Affected: the skew merging and the times of {', '.join(SHORT_PHASES)} "
                     f"(each edge +-{_ns(period)})")
    hs_lines = [b for b in ("REQ", "ACK") if b in signals]
    handshakes_ok = None
    if hs_lines:
        one_sample = {b: glitches[b] for b in hs_lines if glitches.get(b)}
        same = int(meta.get("req_ack_same_sample", 0))
        handshakes_ok = not one_sample and not same
        if not handshakes_ok:
            affected += HANDSHAKE_FIGURES
            why = [f"{n} {b} pulse(s) one sample long" for b, n in one_sample.items()]
            if same:
                why.append(f"{same} REQ and ACK edges in the same sample")
            notes.append(f"the sample period ({_ns(period)}) is too coarse to resolve REQ/ACK handshakes "
                         f"({'; '.join(why)}): handshakes may be merged or missed. Affected: "
                         f"{', '.join(HANDSHAKE_FIGURES)}")
    total = sum(glitches.values())
    examples = meta.get("glitch_examples", [])
    if total:
        shown = ", ".join(f"{e['line']} at {_ns(e['t_ns'])}" for e in examples)
        per_line = ", ".join(f"{b} {n}" for b, n in glitches.items())
        notes.append(f"{total} one-sample glitch(es) (a line changed for a single sample): {per_line}; "
                     f"first: {shown}")
    block = {"sample_period_ns": period, "sample_period_known": known, "samplerate": meta.get("samplerate"),
             "settle_resolved": settle_ok if period is not None else None, "handshakes_resolved": handshakes_ok,
             "glitches": total, "glitches_by_line": dict(glitches), "glitch_examples": list(examples),
             "affected": affected}
    return block, notes
