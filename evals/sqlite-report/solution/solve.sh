#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import sqlite3

db = sqlite3.connect("/app/shop.db")
rows = db.execute("""
    SELECT c.name, SUM(l.quantity * l.unit_price_cents) AS cents
    FROM orders o JOIN customers c ON c.id = o.customer_id JOIN order_lines l ON l.order_id = o.id
    WHERE o.status = 'paid' AND o.placed >= '2026-07-01' AND o.placed < '2027-01-01'
    GROUP BY c.id ORDER BY cents DESC LIMIT 3
""").fetchall()
with open("/app/top_customers.csv", "w") as out:
    out.write("name,revenue\n")
    for name, cents in rows:
        out.write(f"{name},{cents // 100}.{cents % 100:02d}\n")
PY
