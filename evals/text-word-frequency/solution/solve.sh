#!/bin/bash
set -euo pipefail
tr 'A-Z' 'a-z' < /app/book.txt | grep -oE '[a-z]+' | sort | uniq -c \
  | awk '{print $1, $2}' | sort -k1,1nr -k2,2 | head -5 > /app/top.txt
