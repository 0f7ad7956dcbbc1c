"""How many finished rows may wait for the I/O sink behind a command still in flight (the
scsilog layer adds up in its compiled engine, native/src/text/scsilog_engine.rs, by the rules
of scsitrace/command_stream.py)."""
from __future__ import annotations

HOLD = 1 << 18      # finished rows held back for the I/O sink behind a command still in flight, at most
