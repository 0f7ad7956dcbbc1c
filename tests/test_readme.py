"""README and docs (issue 17, point 8): the synopsis lists every flag of every command (it is
generated from the parsers), no relative link is dead, and the set-up prints no setuptools
banner."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from scsitrace import synopsis
from scsitrace.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_synopsis_is_the_generated_one():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert synopsis.readme_block(readme) == synopsis.fenced(), \
        "README synopsis is stale: python -m scsitrace.synopsis --write README.md"


def _command_lines(block: str) -> dict[str, str]:
    """command -> its synopsis text (first line and continuation lines)."""
    out, name = {}, None
    for ln in block.splitlines():
        if ln.startswith("scsitrace "):
            name = ln.split()[1]
            out[name] = ln
        elif ln.startswith(" ") and name:
            out[name] += " " + ln.strip()
    return out


def test_synopsis_names_every_flag_of_every_command():
    cmds = _command_lines(synopsis.readme_block((REPO / "README.md").read_text(encoding="utf-8")))
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(COMMANDS) <= set(cmds)
    for name in COMMANDS:
        flags = {max(a.option_strings, key=len) for a in sub.choices[name]._actions
                 if a.option_strings and "--help" not in a.option_strings}
        shown = set(re.findall(r"\[?(--[a-z][a-z0-9-]*)", cmds[name]))
        assert flags and flags == shown, (name, flags ^ shown)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_dead_relative_links(doc):
    text = doc.read_text(encoding="utf-8")
    dead = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists():
            dead.append(target)
    # paths outside the repository (a clean clone has no ../shared) are dead too
    dead += re.findall(r"`(\.\./[^`]+)`", text)
    assert not dead, f"{doc.name}: {dead}"


def test_readme_links_the_ancot_text_spec():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(docs/ancot-text.md)" in readme
    assert (REPO / "docs" / "ancot-text.md").read_text().startswith("# ancot-text v1")


def test_run_sh_silences_the_editable_install_notice():
    """The notice is a Python warning raised in pip's build subprocess; run.sh filters only it
    (the clean-clone run, `bash run.sh demo`, was checked by hand: no banner)."""
    run = (REPO / "run.sh").read_text()
    install = [ln for ln in run.splitlines() if "pip install" in ln and "-e" in ln]
    assert install and all('PYTHONWARNINGS="ignore:Editable installation"' in ln for ln in install)


def test_every_package_is_installed_by_a_plain_install():
    """pyproject lists packages by hand (parsers/ and reports/ map into scsitrace): a package
    left out works in the editable set-up but is missing from `pip install .`."""
    import tomllib
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {v: k for k, v in conf["package-dir"].items()}
    found = set()
    for top, name in dirs.items():
        for init in (REPO / top).glob("**/__init__.py"):
            found.add(".".join((name, *init.parent.relative_to(REPO / top).parts)))
    data_only = set(conf.get("package-data", {})) - found        # e.g. reports/assets: files, no code
    assert found and found | data_only == set(conf["packages"]), (found | data_only) ^ set(conf["packages"])
