"""Bus layer: line transitions (ancot-text, VCD, logic analyzers, simulator) -> phase runs
(`runs`) -> connections and I/Os (`machine`) -> segments, ios, anomalies (`analysis`)."""
from .._lazy import from_analysis

__all__ = ["analyze", "select"]

__getattr__ = from_analysis(__name__, __all__)
