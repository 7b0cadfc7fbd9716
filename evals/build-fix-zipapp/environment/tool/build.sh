#!/bin/bash
# Builds dist/adder.pyz, a single-file executable of the adder package.
set -euo pipefail
cd "$(dirname "$0")"
rm -rf build dist
mkdir -p build dist
cp -r source/adder build/
python3 -m compileall -q build
python3 -m zipapp build -m "adder.main:run" -o dist/adder.pyz -p "/usr/bin/env python3"
