#!/bin/bash
set -euo pipefail
cat > /app/server.py <<'PY'
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/health":
            self.answer(200, "ok")
        elif url.path == "/sum":
            query = parse_qs(url.query)
            try:
                self.answer(200, str(int(query["a"][0]) + int(query["b"][0])))
            except (KeyError, ValueError):
                self.answer(400, "bad request")
        else:
            self.answer(404, "not found")

    def answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("127.0.0.1", 8080), Handler).serve_forever()
PY
setsid nohup python3 /app/server.py > /tmp/server.log 2>&1 < /dev/null &
for _ in $(seq 50); do curl -sf http://127.0.0.1:8080/health > /dev/null && exit 0; sleep 0.1; done
exit 1
