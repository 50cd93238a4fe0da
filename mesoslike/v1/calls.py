"""What every v1 call shares, before its own meaning: the request's media
types, its JSON body, and the refusals as Mesos's HTTP statuses
(docs/mesos-api.rst, "Errors"). Pure.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from mesoslike.errors import MesoslikeError

__all__ = ["CallError", "JSON", "PROTOBUF", "RECORDIO", "decode_call", "accepts_json", "call_type", "STREAM_ID_HEADER"]

JSON = "application/json"
PROTOBUF = "application/x-protobuf"
RECORDIO = "application/recordio"
#: the header that names a scheduler's or executor's event stream on its other calls
STREAM_ID_HEADER = "Mesos-Stream-Id"


class CallError(MesoslikeError):
    """A call refused with HTTP ``status`` (400 bad call, 401/403 identity,
    404, 405, 406, 409, 415 media type, 503 no leader ...) and a message
    for people."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def decode_call(content_type: str | None, body: bytes) -> dict[str, Any]:
    """A call's body as a JSON object; CallError 415 for a media type other
    than JSON (protobuf is not spoken: docs/mesos-api.rst), 400 for a body
    that is not a JSON object with a ``type``."""
    media = _media_type(content_type)
    if not media:
        raise CallError(400, "Expecting 'Content-Type' to be present")
    if media == PROTOBUF:
        raise CallError(415, f"Expecting 'Content-Type' of {JSON}: mesoslike does not speak {PROTOBUF}")
    if media != JSON:
        raise CallError(415, f"Expecting 'Content-Type' of {JSON}")
    try:
        call = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise CallError(400, f"Failed to parse body into JSON: {str(exc)[:200]}") from None
    if not isinstance(call, dict):
        raise CallError(400, "Failed to convert JSON into Call: a call is a JSON object")
    call_type(call)
    return call


def call_type(call: Mapping[str, Any]) -> str:
    kind = call.get("type")
    if not isinstance(kind, str) or not kind:
        raise CallError(400, "Failed to validate Call: Expecting 'type' to be present")
    return kind


def accepts_json(accept: str | None) -> bool:
    """Whether an ``Accept`` header allows JSON (no header: anything)."""
    if accept is None or not accept.strip():
        return True
    for item in accept.split(",")[:64]:
        media, *parameters = item.split(";")
        weights = [p.strip()[2:] for p in parameters if p.strip().lower().startswith("q=")]
        try:
            wanted = float(weights[0]) > 0 if weights else True
        except ValueError:
            wanted = False
        if wanted and _media_type(media) in (JSON, "application/*", "*/*"):
            return True
    return False
