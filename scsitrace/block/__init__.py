"""Block layer (blktrace, blkparse text): event codes and frames the parsers hand over
(`events`), btt's stage machine (`machine`), its statistics (`stats`), the other tables
(`tables`), and the analysis that runs them (`analysis`)."""
from .._lazy import from_analysis

__all__ = ["analyze"]

__getattr__ = from_analysis(__name__, __all__)
