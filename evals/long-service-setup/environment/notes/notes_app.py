"""A tiny notes service: GET /notes lists them, POST /notes adds the request body as one note.
Every request needs `Authorization: Bearer TOKEN`. Settings: /etc/notes/notes.conf, section [server]
with port, token and data_dir (a directory the service writes notes.json into)."""

import configparser
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

config = configparser.ConfigParser()
if not config.read("/etc/notes/notes.conf"):
    sys.exit("cannot read /etc/notes/notes.conf")
server = config["server"]
STORE = Path(server["data_dir"]) / "notes.json"


class Handler(BaseHTTPRequestHandler):
    def authorised(self):
        if self.headers.get("Authorization") == f"Bearer {server['token']}":
            return True
        self.reply(401, {"error": "unauthorised"})
        return False

    def do_GET(self):
        if self.path == "/notes" and self.authorised():
            self.reply(200, self.load())

    def do_POST(self):
        if self.path == "/notes" and self.authorised():
            notes = self.load() + [self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()]
            STORE.write_text(json.dumps(notes))
            self.reply(201, notes)

    def load(self):
        return json.loads(STORE.read_text()) if STORE.exists() else []

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        print(format % args, file=sys.stderr, flush=True)


ThreadingHTTPServer(("127.0.0.1", server.getint("port")), Handler).serve_forever()
