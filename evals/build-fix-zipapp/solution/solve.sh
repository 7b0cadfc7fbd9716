#!/bin/bash
set -euo pipefail
cd /app/tool
sed -i 's#cp -r source/adder build/#cp -r src/adder build/#' build.sh
sed -i 's/    for number in numbers$/    for number in numbers:/' src/adder/core.py
cat > src/adder/main.py <<'PY'
import sys

from adder.core import add


def run():
    total = float(add(float(arg) for arg in sys.argv[1:]))
    print(int(total) if total.is_integer() else total)
PY
./build.sh
