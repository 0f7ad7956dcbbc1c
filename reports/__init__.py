"""Reports: pure frame-to-frame/dict functions (summary, tables, attribution) and renderers
(terminal, CSV, JSON, HTML) kept apart. Reports never read input formats."""
