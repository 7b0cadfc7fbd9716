"""The visible tests unchanged and passing, plus hidden cases of the same functions."""

import hashlib
import subprocess
import sys
from pathlib import Path

TESTS_SHA = "0a70279ca2757d92138496199776607bf7d07419db07dbf02fdfd49e4907ced7"
if hashlib.sha256(Path("/app/stats/test_stats.py").read_bytes()).hexdigest() != TESTS_SHA:
    sys.exit("test_stats.py was changed")
ran = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd="/app/stats", capture_output=True, text=True)
if ran.returncode:
    sys.exit(ran.stderr[-2000:])
sys.path.insert(0, "/app/stats")
from stats import median, percentile  # noqa: E402

cases = [
    (median([7]), 7),
    (median([1, 2]), 1.5),
    (median([9, 2, 7, 4, 5, 1]), 4.5),
    (percentile([1, 2, 3, 4], 25), 1.75),
    (percentile([1, 2, 3, 4], 90), 3.7),
    (percentile([42], 50), 42),
]
bad = [(got, want) for got, want in cases if abs(got - want) > 1e-9]
if bad:
    sys.exit(f"wrong results (got, expected): {bad}")
