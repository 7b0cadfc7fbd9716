"""5xx clients and count, parsed here from the status field (not from the path)."""

import ipaddress
import re
import sys
from pathlib import Path

LINE = re.compile(r'^(\S+) \S+ \S+ \[[^]]*\] "[^"]*" (\d{3}) ')
ips, count = set(), 0
for line in Path("/app/access.log").read_text().splitlines():
    match = LINE.match(line)
    if match and match.group(2).startswith("5"):
        ips.add(match.group(1))
        count += 1
expected = [str(ip) for ip in sorted(ipaddress.ip_address(i) for i in ips)]
try:
    got = Path("/app/bad_ips.txt").read_text().split()
    got_count = int(Path("/app/bad_count.txt").read_text().strip())
except (OSError, ValueError) as exc:
    sys.exit(f"missing or malformed output: {exc}")
if got != expected:
    sys.exit(f"expected {expected}, got {got}")
if got_count != count:
    sys.exit(f"expected {count} 5xx responses, got {got_count}")
