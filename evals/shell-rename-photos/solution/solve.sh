#!/bin/bash
set -euo pipefail
cd /app/photos
for f in IMG_*.jpg; do
  if [[ "$f" =~ ^IMG_([0-9]{4})([0-9]{2})([0-9]{2})_([0-9]{2})([0-9]{2})([0-9]{2})\.jpg$ ]]; then
    m=("${BASH_REMATCH[@]}")
    mv -- "$f" "${m[1]}-${m[2]}-${m[3]}_${m[4]}-${m[5]}-${m[6]}.jpg"
  fi
done
