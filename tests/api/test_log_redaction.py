"""Tokens stay out of the process's own log lines, even with -v (where httpx logs each request URL)."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"  # Telegram's shape; the stand-in answers any
PROGRAM = """
import logging, sys
import httpx
from control_plane.cli.main import main
main(verbose=True, profile=None)
httpx.get(sys.argv[1])
logging.getLogger("hermetic.test").info("slack said %s", "xoxb-1234567890-abcdefghijklmnop")
"""


@pytest.fixture
def server() -> Iterator[str]:
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_verbose_logs_name_the_request_but_not_the_token(server: str) -> None:
    url = f"{server}/bot{TOKEN}/getMe"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, url], capture_output=True, text=True, timeout=120, check=True
    )
    assert "HTTP Request: GET" in done.stderr and "/bot[REDACTED]/getMe" in done.stderr, done.stderr
    assert TOKEN not in done.stderr and TOKEN.split(":")[1] not in done.stderr
    assert "slack said [REDACTED:slack-token]" in done.stderr
