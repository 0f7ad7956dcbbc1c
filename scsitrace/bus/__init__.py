"""Bus layer: line transitions (ancot-text, VCD, logic analyzers, simulator) -> phase runs
(`runs`) -> connections and I/Os (`machine`) -> segments, ios, anomalies (`analysis`)."""
from .analysis import analyze, select

__all__ = ["analyze", "select"]
