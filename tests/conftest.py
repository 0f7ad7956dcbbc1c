import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import subprocess  # noqa: E402

import pytest  # noqa: E402

CHECKOUT = Path(__file__).resolve().parent.parent


def _untracked() -> set[str] | None:
    """Files and directories git does not track in the checkout, ignored ones included (btt's
    *_fp.dat are in .gitignore); None outside a git checkout."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=normal"],
                             cwd=CHECKOUT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {line[3:] for line in out.splitlines() if line[:2] in ("??", "!!")}


@pytest.fixture(scope="session", autouse=True)
def no_litter_in_the_checkout():
    """Tests write only into their temporary directories: no new untracked file in the
    checkout when the session ends (btt's *_fp.dat once landed in the root)."""
    before = _untracked()
    yield
    after = _untracked()
    if before is not None and after is not None:
        new = sorted(f for f in after - before if "__pycache__" not in f and not f.startswith(".hypothesis"))
        assert not new, f"tests left files in the checkout: {new[:10]}"
