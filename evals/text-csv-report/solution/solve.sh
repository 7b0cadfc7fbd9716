#!/bin/bash
set -euo pipefail
{
  echo "region,total"
  awk -F, 'NR > 1 && NF >= 3 { total[$1] += $3 } END { for (r in total) printf "%s,%.2f\n", r, total[r] }' \
    /app/sales.csv | sort -t, -k2,2nr
} > /app/report.csv
