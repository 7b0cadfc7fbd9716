"""The LISTEN side of the events table (store/session_events.py): a thread per replica that wakes its
followers when another replica wrote a session's events. Its own module so that only a replica on
PostgreSQL imports psycopg (a quarter second of every process's start-up otherwise)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from sqlalchemy.engine import make_url
from tenacity import RetryError, Retrying, retry_if_exception_type, wait_exponential_jitter

from .session_events import CHANNEL

log = logging.getLogger(__name__)


class Listener:
    """A thread LISTENing on the events channel that calls `woken(session_id)` for each notification
    (psycopg's notifies generator: it waits on the connection's socket, no polling). A lost connection
    (PostgreSQL restarted, the backend terminated, the network cut) is opened again with backoff; since
    notifications sent meanwhile are gone, `missed()` is called then, for every follower to read the table."""

    def __init__(self, url: str, woken: Callable[[str], None], missed: Callable[[], None]) -> None:
        self._dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._woken, self._missed = woken, missed
        self._stop = threading.Event()
        self._conn = self._connect()  # at start-up a database that is not there is an error, not a retry
        self._thread = threading.Thread(target=self._listen, name="hermetic-listen", daemon=True)
        self._thread.start()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        conn = psycopg.connect(self._dsn, autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                for note in self._conn.notifies(timeout=1.0):  # the timeout only lets close() be seen
                    self._woken(note.payload)
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                log.warning("the events listener lost its connection (%s): listening again", exc)
                self._conn.close()
                try:
                    self._conn = self._reconnect()
                except RetryError:  # close() was called while the database was away
                    return
                log.warning("the events listener is back: followers here read what they missed")
                self._missed()

    def _reconnect(self) -> psycopg.Connection[tuple[object, ...]]:
        retrying = Retrying(
            retry=retry_if_exception_type(psycopg.OperationalError),
            wait=wait_exponential_jitter(multiplier=0.1, max=5.0),
            stop=lambda _state: self._stop.is_set(),
            sleep=self._pause,
        )
        return retrying(self._connect)

    def _pause(self, seconds: float) -> None:
        self._stop.wait(seconds)  # a close() ends the wait at once

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._conn.close()
