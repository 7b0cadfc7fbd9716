#!/bin/bash
set -euo pipefail
curl -sSf http://data.hm14.test/inventory.csv -o /app/inventory.csv
awk -F, 'NR > 1 { total += $2 } END { print total }' /app/inventory.csv > /app/total.txt
