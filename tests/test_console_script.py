"""The installed `scsitrace` command (the console script users and CI run), as a process of
its own: same output and exit statuses as main() in this process, and its tuned garbage
collector loses no cyclic garbage on a long run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clirun import run_cli

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "scsitrace"
EXAMPLE = str(ROOT / "fixtures" / "examples" / "table3-slice.ancot")

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="scsitrace is not installed in this environment")


def command(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("argv", [["analyze", EXAMPLE, "--json", "-"], ["analyze", EXAMPLE, "--width", "100"],
                                  ["analyze", EXAMPLE + ".missing"], ["analyze", EXAMPLE, "--format", "nope"]])
def test_console_script_prints_what_main_prints(argv):
    proc = command(*argv)
    status, out, err = run_cli(argv)
    assert (proc.returncode, proc.stdout, proc.stderr) == (status, out, err)
    assert status in (0, 2) and "Traceback" not in proc.stderr


def test_console_script_collects_cyclic_garbage():
    """console() only spaces the collections out: cycles made after start-up are freed."""
    probe = ("import gc, sys, weakref\n"
             "from scsitrace import cli\n"
             "class Node: pass\n"
             "refs = []\n"
             "def cycles(argv=None):\n"
             "    for _ in range(300_000):\n"
             "        a, b = Node(), Node(); a.b, b.a = b, a; refs.append(weakref.ref(a))\n"
             "    return 0\n"
             "cli.main = cycles\n"
             "assert cli.console() == 0\n"
             "print(sum(r() is not None for r in refs), gc.get_threshold()[0])\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    alive, threshold = map(int, out.split())
    assert threshold > 700                 # the command's thresholds are in force ...
    assert alive < 300_000 // 2            # ... and most cycles were collected during the run
