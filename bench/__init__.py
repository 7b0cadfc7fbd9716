"""Benchmarks: they print figures and write raw samples; tests never assert times.

The throwaway servers and stand-ins they share with the test suite (tests/support/sshd.py,
tests/support/postgres.py, tests/standins/telegram_standin.py) are imported as the suite imports them, as
top-level modules: a package named
`tests` that a dependency installs (markdown-to-mrkdwn's) would shadow `tests.sshd`."""

import sys
from pathlib import Path

for _folder in ("support", "standins"):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / _folder))
