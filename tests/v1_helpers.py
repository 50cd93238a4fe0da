"""A minimal client of Mesos's v1 HTTP APIs for tests (docs/mesos-api.rst):
plain calls, and event streams read on a thread of their own through
:class:`mesoslike.v1.RecordDecoder`."""

from __future__ import annotations

import base64
import http.client
import json
import threading
from typing import Any, Callable
from urllib.parse import urlsplit

from mesoslike.v1 import RecordDecoder

DEADLINE = 20.0


def basic(principal: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{principal}:{secret}".encode()).decode()}


def post(url: str, body: object, headers: dict[str, str] | None = None,
         content_type: str | None = "application/json", method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of one request."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=DEADLINE)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
        sent = dict(headers or {})
        if content_type is not None:
            sent.setdefault("Content-Type", content_type)
        connection.request(method, parts.path or "/", body=data, headers=sent)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


class EventStream:
    """A SUBSCRIBE call's answer: status, headers, and the events as they come."""

    def __init__(self, url: str, call: dict, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self._connection.connect()
        self._socket = self._connection.sock   # the response takes it over: kept to close the stream
        self._connection.request("POST", parts.path, body=json.dumps(call).encode(),
                                 headers={"Content-Type": "application/json", "Accept": "application/json",
                                          **(headers or {})})
        self.response = self._connection.getresponse()
        self.status = self.response.status
        self.headers = {k.lower(): v for k, v in self.response.getheaders()}
        self.events: list[dict[str, Any]] = []
        self.ended = False
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        if self.status == 200:
            self._thread.start()
        else:
            self.body = self.response.read()

    @property
    def stream_id(self) -> str:
        return self.headers.get("mesos-stream-id", "")

    def _read(self) -> None:
        decoder = RecordDecoder()
        try:
            while True:
                piece = self.response.read1(65536)
                if not piece:
                    break
                for record in decoder.feed(piece):
                    with self._condition:
                        self.events.append(json.loads(record))
                        self._condition.notify_all()
        except (OSError, ValueError, http.client.HTTPException):
            pass
        finally:
            with self._condition:
                self.ended = True
                self._condition.notify_all()

    def wait_for(self, match: Callable[[dict], bool] | str, timeout: float = DEADLINE) -> dict:
        """The first event (oldest first) that ``match`` accepts (an event type: that type)."""
        test = (lambda event: event.get("type") == match) if isinstance(match, str) else match
        with self._condition:
            found: list[dict] = []

            def seen() -> bool:
                found[:] = [event for event in self.events if test(event)]
                return bool(found) or self.ended
            self._condition.wait_for(seen, timeout)
            if not found:
                raise AssertionError(f"no such event within {timeout} s (ended: {self.ended}); got "
                                     f"{[event.get('type') for event in self.events]}")
            return found[0]

    def wait_ended(self, timeout: float = DEADLINE) -> None:
        with self._condition:
            assert self._condition.wait_for(lambda: self.ended, timeout), "the stream did not end"

    def types(self) -> list[str]:
        with self._condition:
            return [event.get("type", "") for event in self.events]

    def close(self) -> None:
        """Leave: the connection is shut, as a scheduler that goes away."""
        try:
            self._socket.shutdown(2)
        except OSError:
            pass
        self._socket.close()
        self._connection.close()
