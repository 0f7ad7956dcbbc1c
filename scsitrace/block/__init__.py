"""Block layer (blktrace, blkparse text): event codes and frames the parsers hand over
(`events`), btt's stage machine (`machine`), its statistics (`stats`), the other tables
(`tables`), and the analysis that runs them (`analysis`)."""
from .analysis import analyze

__all__ = ["analyze"]
