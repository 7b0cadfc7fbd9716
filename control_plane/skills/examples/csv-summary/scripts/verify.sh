#!/usr/bin/env bash
# Check csv_summary.py on a CSV with every column type, an empty cell and a ragged row.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -r -- "$work"' EXIT
cat > "$work/data.csv" <<'CSV'
id,price,active,day,city
1,2.5,true,2024-01-03,Paris
2,4,false,2024-02-10,
3,1.5,true,2023-12-31,Lyon
4,2,true,2024-01-01,Paris,extra
CSV
python3 scripts/csv_summary.py "$work/data.csv" --json > "$work/out.json"
python3 - "$work/out.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
cols = {c["name"]: c for c in out["columns"]}
assert out["rows"] == 4 and out["ragged_rows"] == 1, out
assert cols["id"]["type"] == "int" and cols["id"]["mean"] == 2.5, cols["id"]
assert cols["price"]["type"] == "float" and cols["price"]["min"] == 1.5 and cols["price"]["max"] == 4, cols["price"]
assert cols["active"]["type"] == "bool", cols["active"]
assert cols["day"]["type"] == "date" and cols["day"]["min"] == "2023-12-31", cols["day"]
assert cols["city"]["type"] == "text" and cols["city"]["empty"] == 1 and cols["city"]["distinct"] == 2, cols["city"]
print("csv-summary: ok")
PY
table=$(python3 scripts/csv_summary.py "$work/data.csv")
grep -qx "4 rows, 5 columns, 1 ragged rows" <<<"$table"
