#!/bin/bash
set -euo pipefail
cd /app/inbox
for f in *; do
  [ -f "$f" ] || continue
  if [[ "$f" == *.* ]]; then ext="${f##*.}"; ext="${ext,,}"; else ext=other; fi
  mkdir -p "/app/sorted/$ext"
  mv -- "$f" "/app/sorted/$ext/"
done
