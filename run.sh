#!/usr/bin/env bash
# One-step set-up and run, on a fresh Debian machine with python3 (as root, or with sudo):
#   bash run.sh demo   # install everything, analyse the bundled example, print the phase table
#   bash run.sh test   # install everything (tshark, blktrace, chromium too), run the whole test suite
set -euo pipefail
cd "$(dirname "$0")"
VENV=${SCSITRACE_VENV:-.venv}
what=${1:-demo}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

apt_install() {  # apt_install CMD PACKAGE...: install PACKAGEs when CMD is missing
  local cmd=$1; shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || { echo "run.sh: $cmd missing and no apt-get; install $* by hand" >&2; return 0; }
  if [ -z "${APT_UPDATED:-}" ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
  echo "run.sh: installing $* (for $cmd)" >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

rust_toolchain() {  # the compiled core (native/, pyo3) is built by pip install: it needs cargo
  if [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
  apt_install cargo cargo-web rustc-web   # bookworm's rustc 1.63 is too old
}

python_env() {
  rust_toolchain
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install __no_such_cmd__ python3-venv python3-pip
  fi
  if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  # The package maps parsers/ and reports/ into scsitrace (pyproject's package-dir), so
  # setuptools installs it in editable mode through an import finder and says so with an
  # "Editable installation ... be careful with folders" notice (a Python warning raised in
  # pip's build subprocess, which inherits PYTHONWARNINGS): that notice alone is silenced.
  PYTHONWARNINGS="ignore:Editable installation" "$VENV/bin/python" -m pip install -q -e ".[test]"
  # An editable install leaves our sources uncompiled: byte-compile them now, so that no run
  # compiles them (every run would, where PYTHONDONTWRITEBYTECODE is set: 0.15 s each)
  "$VENV/bin/python" -m compileall -q -j 0 scsitrace parsers reports >/dev/null
}

case "$what" in
  demo)
    python_env
    "$VENV/bin/scsitrace" analyze fixtures/examples/table3-slice.ancot --profile raid1990 --io-size 32768
    ;;
  test)
    python_env
    echo 'debconf debconf/frontend select Noninteractive' | as_root debconf-set-selections 2>/dev/null || true
    echo 'wireshark-common wireshark-common/install-setuid boolean false' | as_root debconf-set-selections 2>/dev/null || true
    apt_install tshark tshark
    apt_install blkparse blktrace
    apt_install chromium chromium
    apt_install iverilog iverilog
    apt_install sigrok-cli sigrok-cli
    shift || true
    "$VENV/bin/python" -m pytest -q "$@"
    ;;
  *)
    echo "usage: bash run.sh demo|test [pytest args]" >&2; exit 2 ;;
esac
