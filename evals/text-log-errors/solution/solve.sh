#!/bin/bash
set -euo pipefail
awk '$9 ~ /^5[0-9][0-9]$/ { print $1 }' /app/access.log | sort -u -t. -k1,1n -k2,2n -k3,3n -k4,4n > /app/bad_ips.txt
awk '$9 ~ /^5[0-9][0-9]$/' /app/access.log | wc -l > /app/bad_count.txt
