"""Summarize a CSV file: row count, per-column type, empty cells, distinct values, numeric stats."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterator
from datetime import date
from typing import Any

DISTINCT_CAP = 10_000
TYPES = ("bool", "int", "float", "date", "text")  # narrowest first


def cell_type(value: str) -> str:
    if value.lower() in ("true", "false"):
        return "bool"
    for kind, parse in (("int", int), ("float", float), ("date", date.fromisoformat)):
        try:
            parse(value)
            return kind
        except ValueError:
            continue
    return "text"


def widen(current: str | None, new: str) -> str:
    if current is None or current == new:
        return new
    if {current, new} == {"int", "float"}:
        return "float"
    return "text"


def summarize(rows: Iterator[list[str]]) -> dict[str, Any]:
    header = next(rows)
    cols: list[dict[str, Any]] = [
        {"name": name, "type": None, "empty": 0, "values": set(), "numbers": []} for name in header
    ]
    count = ragged = 0
    for row in rows:
        count += 1
        if len(row) != len(header):
            ragged += 1
        for col, value in zip(cols, row, strict=False):
            value = value.strip()
            if not value:
                col["empty"] += 1
                continue
            if len(col["values"]) <= DISTINCT_CAP:
                col["values"].add(value)
            col["type"] = widen(col["type"], cell_type(value))
            col["numbers"].append(value)
    out = []
    for col in cols:
        kind = col["type"] or "text"
        summary: dict[str, Any] = {"name": col["name"], "type": kind, "empty": col["empty"]}
        distinct = len(col["values"])
        summary["distinct"] = distinct if distinct <= DISTINCT_CAP else f">{DISTINCT_CAP}"
        if kind in ("int", "float"):
            numbers = [float(v) for v in col["numbers"]]
            summary.update(min=min(numbers), max=max(numbers), mean=round(sum(numbers) / len(numbers), 6))
        elif kind == "date":
            summary.update(min=min(col["numbers"]), max=max(col["numbers"]))
        out.append(summary)
    return {"rows": count, "ragged_rows": ragged, "columns": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--delimiter", help="default: sniffed from the first lines (comma if unsure)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    with open(args.path, newline="", encoding="utf-8", errors="replace") as handle:
        delimiter = args.delimiter
        if delimiter is None:
            try:
                delimiter = csv.Sniffer().sniff(handle.read(4096), delimiters=",;\t|").delimiter
            except csv.Error:
                delimiter = ","
            handle.seek(0)
        result = summarize(csv.reader(handle, delimiter=delimiter))
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    print(f"{result['rows']} rows, {len(result['columns'])} columns, {result['ragged_rows']} ragged rows")
    for col in result["columns"]:
        stats = ", ".join(f"{k} {col[k]}" for k in ("min", "max", "mean") if k in col)
        print(
            f"- {col['name']}: {col['type']}, {col['empty']} empty, {col['distinct']} distinct"
            + (f", {stats}" if stats else "")
        )


if __name__ == "__main__":
    main()
