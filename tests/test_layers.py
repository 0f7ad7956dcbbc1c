"""Layers point one way (issue 26, point 6): every import in `scsitrace`, `scsitrace.parsers`
and `scsitrace.reports` (read from the source with ast, imports inside functions included)
goes to a module of the same tier or a lower one, so there is no cycle between tiers and the
library never imports the command line.

    base       errors, schema, tables, stats, the compiled core and process helpers
    records    what parsers hand over: model, streams, scsi, each layer's record declarations
    parsers    scsitrace.parsers
    layers     bus, block, usb, scsilog and the engines they share
    reports    scsitrace.reports, canonical_export
    app        core, request, api, batch, pool, corpus, sim
    commands   scsitrace.commands
    cli        cli and what builds on the parser (synopsis, fixtures)

A new module is placed by its package; a new top-level module of `scsitrace` must be given
a tier in TIERS (the test says so)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"scsitrace": REPO / "scsitrace", "scsitrace.parsers": REPO / "parsers",
         "scsitrace.reports": REPO / "reports"}
ORDER = ("base", "records", "parsers", "layers", "reports", "app", "commands", "cli")

TIERS = {
    "base": ["scsitrace.errors", "scsitrace.schema", "scsitrace.tables", "scsitrace.stats", "scsitrace._native",
             "scsitrace._keys", "scsitrace._lazy", "scsitrace.heap", "scsitrace.progress", "scsitrace.inert",
             "scsitrace.outputs", "scsitrace.interrupts"],
    # a layer's record declarations sit below the parsers that fill them
    "records": ["scsitrace.model", "scsitrace.streams", "scsitrace.scsi", "scsitrace.command_sets", "scsitrace.block.events",
                "scsitrace.usb.urbs", "scsitrace.scsilog.events"],
    "layers": ["scsitrace.command_tables", "scsitrace.command_stream", "scsitrace.tiling", "scsitrace.filters",
               "scsitrace.completeness", "scsitrace.inputcheck", "scsitrace.series", "scsitrace.time_bins", "scsitrace.bandwidth",
               "scsitrace.clock"],
    "reports": ["scsitrace.canonical_export"],
    "app": ["scsitrace", "scsitrace.core", "scsitrace.request", "scsitrace.api", "scsitrace.batch",
            "scsitrace.pool", "scsitrace.corpus"],
    "commands": ["scsitrace.preflight"],          # reads the commands' arguments (their outputs, inputs)
    "cli": ["scsitrace.cli", "scsitrace.synopsis", "scsitrace.fixtures", "scsitrace.readme_samples"],
}
PACKAGES = {"scsitrace.parsers": "parsers", "scsitrace.reports": "reports", "scsitrace.bus": "layers",
            "scsitrace.block": "layers", "scsitrace.usb": "layers", "scsitrace.scsilog": "layers",
            "scsitrace.sim": "app", "scsitrace.commands": "commands"}


def modules() -> dict[str, Path]:
    """Every module of the three packages: dotted name -> file."""
    out = {}
    for package, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("").parts
            if package == "scsitrace" and rel[0] in ("parsers", "reports"):
                continue
            rel = rel[:-1] if rel[-1] == "__init__" else rel
            out[".".join((package, *rel))] = path
    return out


def tier(module: str) -> str:
    for name, members in TIERS.items():
        if module in members:
            return name
    for package, name in sorted(PACKAGES.items(), key=lambda kv: -len(kv[0])):
        if module == package or module.startswith(package + "."):
            return name
    if module.startswith("scsitrace._native"):
        return "base"
    raise AssertionError(f"{module}: no tier; add it to TIERS in tests/test_layers.py")


def imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module imported) for every import statement of the file, at any depth. `from
    package import name` imports package.name when that is a module, else the package."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.append((node.lineno, full if full in known else base))
    return [(line, name) for line, name in out if name == "scsitrace" or name.startswith("scsitrace.")]


def _resolve(name: str, known: set[str]) -> str:
    """The module a dotted name lands in (scsitrace._native.usb -> scsitrace._native)."""
    while name not in known and "." in name:
        if name.startswith("scsitrace._native"):
            return "scsitrace._native"
        name = name.rpartition(".")[0]
    return name


def graph() -> list[tuple[str, int, str]]:
    found = modules()
    known = set(found) | {"scsitrace._native"}
    return [(module, line, _resolve(target, known))
            for module, path in found.items() for line, target in imports(module, path, known)]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in list(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_has_a_tier():
    for module in modules():
        assert tier(module) in ORDER


def test_no_import_points_up_the_stack():
    upward = [f"{module}:{line} ({tier(module)}) imports {target} ({tier(target)})"
              for module, line, target in graph() if ORDER.index(tier(target)) > ORDER.index(tier(module))]
    assert not upward, "imports that point up the stack:\n" + "\n".join(upward)


def test_no_cycle_between_tiers():
    edges = {(tier(m), tier(t)) for m, _, t in graph() if tier(m) != tier(t)}
    for a, b in edges:
        assert (b, a) not in edges, f"tiers {a} and {b} import each other"


def test_no_import_cycle_between_modules():
    """Not even inside a tier: two modules that import each other (at any depth, for type
    annotations too) are one module split in two, or a shared piece waiting for a module of
    its own."""
    edges: dict[str, set[str]] = {}
    for module, _, target in graph():
        if module != target:
            edges.setdefault(module, set()).add(target)
    assert not cycles(edges), f"import cycles: {cycles(edges)}"


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}, [["a", "b"], ["c", "d"]]),
])
def test_the_cycle_finder_finds_cycles(edges, expected):
    assert sorted(cycles(edges)) == expected


def test_the_library_does_not_import_the_command_line():
    below = [f"{m}:{line} imports {t}" for m, line, t in graph()
             if tier(m) not in ("commands", "cli") and (t.startswith("scsitrace.commands") or t == "scsitrace.cli")]
    assert not below, "\n".join(below)


@pytest.mark.parametrize("source, expected", [
    ("from scsitrace.cli import build_parser\n", "scsitrace.cli"),
    ("def f():\n    from .commands import baseline\n", "scsitrace.commands.baseline"),
    ("def f():\n    from .usb.analysis import _control_anomalies\n", "scsitrace.usb.analysis"),
    ("import scsitrace.reports.summary\n", "scsitrace.reports.summary"),
])
def test_the_walk_sees_each_form_of_import(tmp_path, source, expected):
    """The checker itself: a top-level, a relative one inside a function, a dotted import."""
    path = tmp_path / "x.py"
    path.write_text(source)
    known = set(modules())
    got = [_resolve(t, known) for _, t in imports("scsitrace.batch", path, known)]
    assert got == [expected]


def test_no_argparse_below_the_commands():
    """Below the CLI options travel as a typed request (scsitrace.request), never a namespace."""
    found = []
    for module, path in modules().items():
        if ORDER.index(tier(module)) >= ORDER.index("commands"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) else []
            found += [f"{module}:{node.lineno}" for name in names if name == "argparse"]
    assert not found, found
