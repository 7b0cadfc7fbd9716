"""A throwaway Synapse (PyPI's matrix-synapse, in a virtualenv of its own: its pins would fight the
project's) on 127.0.0.1 with its own config and SQLite database, for the Matrix tests: no federation,
no key servers, rate limits lifted; users registered through the shared-secret admin API. And a person
on it: a plain client-server API client (requests) whose /sync runs in a thread of its own."""

from __future__ import annotations

import hashlib
import hmac
import os
import queue
import secrets
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
import yaml
from ngircd import REPLY_TIMEOUT, free_port, stop

VENV = Path(os.environ.get("HERMETIC_SYNAPSE_VENV", "/opt/synapse-venv"))
SERVER_NAME = "matrix.test"
PASSWORD = "matrix-secret"
START_TIMEOUT = 120.0
"""Seconds Synapse may take to create its database and answer /health (slow on a loaded machine)."""
LIFTED = {"per_second": 1000, "burst_count": 1000}


class Synapse:
    """Synapse in the foreground: one client listener on loopback, SQLite, no federation listener,
    no trusted key servers (nothing leaves the machine), registration only by shared secret."""

    def __init__(self) -> None:
        python = VENV / "bin" / "python"
        if not python.exists():
            pytest.skip(f"Synapse is not installed in {VENV} (setup.sh installs it from PyPI)")
        self.dir = Path(tempfile.mkdtemp(prefix="hermetic-synapse-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = self.dir / "homeserver.yaml"
        subprocess.run(
            [str(python), "-m", "synapse.app.homeserver", "--server-name", SERVER_NAME,
             "--config-path", str(config), "--data-directory", str(self.dir),
             "--generate-config", "--report-stats=no"],
            check=True, capture_output=True, timeout=120, cwd=self.dir,
        )  # fmt: skip
        settings = yaml.safe_load(config.read_text())
        self.secret = secrets.token_hex(16)
        settings.update(
            listeners=[{"port": self.port, "bind_addresses": ["127.0.0.1"], "type": "http", "tls": False,
                        "x_forwarded": False, "resources": [{"names": ["client"], "compress": False}]}],
            database={"name": "sqlite3", "args": {"database": str(self.dir / "homeserver.db")}},
            registration_shared_secret=self.secret,
            enable_registration=False,
            trusted_key_servers=[],
            federation_domain_whitelist=[],
            suppress_key_server_warning=True,
            presence={"enabled": False},
            url_preview_enabled=False,
            max_upload_size="10M",
            rc_message=LIFTED, rc_registration=LIFTED, rc_joins={"local": LIFTED, "remote": LIFTED},
            rc_login={"address": LIFTED, "account": LIFTED, "failed_attempts": LIFTED},
            rc_invites={"per_room": LIFTED, "per_user": LIFTED, "per_issuer": LIFTED},
            rc_admin_redaction=LIFTED,
            log_config=str(self.dir / "log.yaml"),
        )  # fmt: skip
        (self.dir / "log.yaml").write_text(
            yaml.safe_dump({
                "version": 1,
                "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
                "handlers": {"file": {"class": "logging.FileHandler", "formatter": "plain",
                                      "filename": str(self.dir / "homeserver.log")}},
                "root": {"level": "WARNING", "handlers": ["file"]},
                "disable_existing_loggers": False,
            })
        )  # fmt: skip
        config.write_text(yaml.safe_dump(settings))
        self.proc = subprocess.Popen(
            [str(python), "-m", "synapse.app.homeserver", "--config-path", str(config)],
            cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._until_healthy()

    def _until_healthy(self) -> None:
        """A readiness wait: poll /health until it answers, within START_TIMEOUT."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                log = self.dir / "homeserver.log"
                raise RuntimeError(f"synapse did not start: {log.read_text() if log.exists() else ''}")
            time.sleep(0.1)

    def register(self, localpart: str, *, admin: bool = False) -> str:
        """An account (PASSWORD) made through /_synapse/admin/v1/register, HMAC-signed with the shared
        secret; its user id. Registering a name twice is refused by the server."""
        return str(self._register(localpart, admin)["user_id"])

    def _register(self, localpart: str, admin: bool) -> dict[str, Any]:
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = requests.get(endpoint, timeout=10).json()["nonce"]
        mac = hmac.new(
            self.secret.encode(), b"\x00".join([nonce.encode(), localpart.encode(), PASSWORD.encode(),
                                                b"admin" if admin else b"notadmin"]), hashlib.sha1
        ).hexdigest()  # fmt: skip
        body = {"nonce": nonce, "username": localpart, "password": PASSWORD, "admin": admin, "mac": mac}
        answer = requests.post(endpoint, json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def rate_limit(self, user_id: str, per_second: float, burst: int) -> None:
        """The server's message rate limit for one user (the admin API's override_ratelimit)."""
        admin = self._register(f"admin-{uuid.uuid4().hex[:8]}", True)
        answer = requests.post(
            f"{self.url}/_synapse/admin/v1/users/{quote(user_id)}/override_ratelimit",
            json={"messages_per_second": per_second, "burst_count": burst},
            headers={"Authorization": f"Bearer {admin['access_token']}"}, timeout=30,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text

    def close(self) -> None:
        stop(self.proc, self.dir)


@pytest.fixture(scope="session")
def synapse() -> Iterator[Synapse]:
    server = Synapse()
    yield server
    server.close()


class MatrixUser:
    """A person: logs in, makes rooms, says things, reacts, uploads; hears every room event."""

    def __init__(self, server: Synapse, localpart: str) -> None:
        self.server = server
        self.user_id = server.register(localpart)
        login = {"type": "m.login.password", "identifier": {"type": "m.id.user", "user": localpart},
                 "password": PASSWORD}  # fmt: skip
        answer = requests.post(f"{server.url}/_matrix/client/v3/login", json=login, timeout=30).json()
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {answer['access_token']}"
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        """Every timeline event of every room, with its `room_id`, as /sync hands them over."""
        self.timeline: list[dict[str, Any]] = []
        """The same events, kept (`hear` takes them off the queue)."""
        self.left: queue.Queue[str] = queue.Queue()
        """The rooms someone left, by their membership events (room_id)."""
        self._stop = threading.Event()
        self._since = self._get("/sync", timeout="0")["next_batch"]
        self._thread = threading.Thread(target=self._sync, daemon=True)
        self._thread.start()

    def _api(self, method: str, path: str, body: Any = None, **params: str) -> dict[str, Any]:
        answer = self.http.request(
            method, f"{self.server.url}/_matrix/client/v3{path}", json=body, params=params, timeout=60
        )
        assert answer.status_code == 200, f"{method} {path}: {answer.status_code} {answer.text}"
        return dict(answer.json())

    def _get(self, path: str, **params: str) -> dict[str, Any]:
        return self._api("GET", path, **params)

    def _sync(self) -> None:
        while not self._stop.is_set():
            try:
                found = self._get("/sync", since=self._since, timeout="1000")
            except (requests.RequestException, AssertionError):
                if self._stop.is_set():
                    return
                raise
            for room_id, room in (found.get("rooms", {}).get("join") or {}).items():
                for event in room.get("timeline", {}).get("events", []):
                    self.timeline.append({**event, "room_id": room_id})
                    self.events.put({**event, "room_id": room_id})
                    if event["type"] == "m.room.member" and event["content"].get("membership") == "leave":
                        self.left.put(room_id)
            self._since = found["next_batch"]

    def create_room(self, invite: list[str], *, direct: bool = True, **extra: Any) -> str:
        preset = "trusted_private_chat" if direct else "private_chat"
        body = {"invite": invite, "is_direct": direct, "preset": preset} | extra
        return str(self._api("POST", "/createRoom", body)["room_id"])

    def send(self, room: str, content: dict[str, Any], kind: str = "m.room.message") -> str:
        path = f"/rooms/{quote(room)}/send/{kind}/{uuid.uuid4().hex}"
        return str(self._api("PUT", path, content)["event_id"])

    def say(self, room: str, text: str, **content: Any) -> str:
        return self.send(room, {"msgtype": "m.text", "body": text} | content)

    def react(self, room: str, event_id: str, key: str) -> str:
        relation = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
        return self.send(room, {"m.relates_to": relation}, "m.reaction")

    def upload(self, name: str, data: bytes, mime: str) -> str:
        answer = self.http.post(
            f"{self.server.url}/_matrix/media/v3/upload", params={"filename": name}, data=data,
            headers={"Content-Type": mime}, timeout=60,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        return str(answer.json()["content_uri"])

    def download(self, mxc: str) -> bytes:
        server, media = mxc.removeprefix("mxc://").split("/", 1)
        answer = self.http.get(
            f"{self.server.url}/_matrix/client/v1/media/download/{server}/{media}", timeout=60
        )
        assert answer.status_code == 200, answer.text
        return answer.content

    def hear(self, room: str, timeout: float = REPLY_TIMEOUT, **match: Any) -> dict[str, Any]:
        """The next event in `room` from someone else whose fields (type, sender) match."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            if event["room_id"] != room or event["sender"] == self.user_id:
                continue
            if all(event.get(key) == value for key, value in match.items()):
                return event

    def hear_reply(self, room: str, last_words: str, timeout: float = REPLY_TIMEOUT) -> list[dict[str, Any]]:
        """A reply's messages and their edits, up to the message or edit whose text ends with
        `last_words` (an edit's new text is its m.new_content)."""
        heard = [self.hear(room, timeout, type="m.room.message")]
        while not text_of(heard[-1]).endswith(last_words):
            heard.append(self.hear(room, timeout, type="m.room.message"))
        return heard

    def texts(self, room: str, sender: str) -> list[str]:
        """The final text of each message `sender` said in `room`, in order (edits applied)."""
        said = [e for e in list(self.timeline) if e["room_id"] == room and e["sender"] == sender]
        return list(final_texts([e for e in said if e["type"] == "m.room.message"]).values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.http.close()


def text_of(event: dict[str, Any], field: str = "body") -> str:
    """A message's text: an edit's is in its m.new_content."""
    content = event["content"]
    return str((content.get("m.new_content") or content).get(field, ""))


def edits_of(event: dict[str, Any]) -> str | None:
    """The id of the event an edit replaces (m.replace), or None."""
    relation = event["content"].get("m.relates_to") or {}
    return relation.get("event_id") if relation.get("rel_type") == "m.replace" else None


def final_texts(heard: list[dict[str, Any]], field: str = "body") -> dict[str, str]:
    """Each message's text once its edits are applied, by the id of the first."""
    texts: dict[str, str] = {}
    for event in heard:
        texts[edits_of(event) or event["event_id"]] = text_of(event, field)
    return texts


def matrix_config(server: Synapse, user_id: str, **extra: Any) -> dict[str, Any]:
    """The gateway's `matrix:` settings for a bot account on this server."""
    return {
        "homeserver": server.url,
        "user_id": user_id,
        "password": PASSWORD,
        "edit_interval": 0.05,
        "sync_timeout": 2,
    } | extra
