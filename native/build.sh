#!/usr/bin/env bash
# Rebuild the compiled core in place after editing native/src (what `pip install -e .` does,
# without pip): bash native/build.sh [PYTHON]   (PYTHON: the venv's, default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-.venv/bin/python}
if [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
cargo build --release --locked --quiet --manifest-path native/Cargo.toml
suffix=$("$py" -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])')
# a new file renamed over the old one: a process still running the old one keeps its mapping
cp native/target/release/lib_native.so "scsitrace/.native$suffix.new"
mv -f "scsitrace/.native$suffix.new" "scsitrace/_native$suffix"
