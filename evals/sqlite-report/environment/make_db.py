"""Build-time only: a small shop database."""

import random
import sqlite3

random.seed(11)
db = sqlite3.connect("/app/shop.db")
db.executescript("""
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                     placed TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE order_lines (order_id INTEGER REFERENCES orders(id), sku TEXT, quantity INTEGER,
                          unit_price_cents INTEGER);
""")
names = ["Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Frances", "Edsger", "Radia"]
for i, name in enumerate(names, 1):
    db.execute("INSERT INTO customers VALUES (?, ?, ?)", (i, name, random.choice(["DE", "FR", "UK", "US"])))
for order in range(1, 121):
    db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)", (order, random.randint(1, 10),
               f"2026-{random.randint(1, 12):02d}-{random.randint(1, 28):02d}",
               random.choice(["paid", "paid", "paid", "cancelled"])))
    for _ in range(random.randint(1, 4)):
        db.execute("INSERT INTO order_lines VALUES (?, ?, ?, ?)",
                   (order, f"SKU-{random.randint(1, 30)}", random.randint(1, 5), random.randint(199, 9999)))
db.commit()
