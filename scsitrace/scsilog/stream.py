"""What the scsilog layer accumulates while an SG_IO log streams through it: the shared
streaming accumulators of the command layers (scsitrace/command_stream.py: `Tables`,
`Tiler`, `Kept`; kernel logs add up by their rules in the compiled engine,
native/src/text/scsilog_engine.rs), and how many finished rows may wait for the I/O sink."""
from __future__ import annotations

from ..command_stream import Kept, Tables, Tiler

__all__ = ["HOLD", "Kept", "Tables", "Tiler"]

HOLD = 1 << 18      # finished rows held back for the I/O sink behind a command still in flight, at most
