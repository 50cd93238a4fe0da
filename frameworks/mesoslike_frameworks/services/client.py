"""A small client of the services' REST API (the CLI's ``mesoslike app`` and
``mesoslike deployment``): JSON over HTTP with the standard library, the
operator token as a bearer token, a ``zk://`` address resolved to the
leading service."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mesoslike import MesoslikeError

__all__ = ["ServicesClient", "ServicesError", "resolve_services"]


class ServicesError(MesoslikeError):
    """The service refused (``status`` and Marathon's ``body``) or could not be reached (status 0)."""

    def __init__(self, status: int, body: Any, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def resolve_services(address: str, timeout: float = 10.0) -> str:
    """``http://HOST:PORT`` as it is; ``zk://.../PATH``: the leading service's HTTP address."""
    if not address.startswith("zk://"):
        return address.rstrip("/")
    from mesoslike import resolve_leader

    try:
        leader = resolve_leader(address, timeout)
    except MesoslikeError as exc:
        raise ServicesError(0, None, f"cannot find the leading service in {address}: {exc}") from None
    if not leader:
        raise ServicesError(0, None, f"no service leads in {address}")
    return leader if "://" in leader else f"http://{leader}"


class ServicesClient:
    def __init__(self, address: str, token: str | None = None, timeout: float = 10.0) -> None:
        self.address = resolve_services(address, timeout)
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        params = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in query.items() if v is not None}
        url = self.address + path + (("?" + urllib.parse.urlencode(params, doseq=True)) if params else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                document = json.loads(raw or b"null")
            except ValueError:
                document = raw.decode(errors="replace")
            raise ServicesError(exc.code, document, _message(exc.code, document)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServicesError(0, None, f"cannot reach the service at {self.address}: "
                                         f"{getattr(exc, 'reason', exc)}") from None
        return json.loads(raw) if raw.strip() else None


def _message(status: int, document: Any) -> str:
    if isinstance(document, dict):
        text = str(document.get("message", ""))
        details = document.get("details") or []
        parts = [f"{d.get('path')}: {', '.join(d.get('errors', []))}" for d in details if isinstance(d, dict)]
        if parts:
            text += " (" + "; ".join(parts) + ")"
        return f"HTTP {status}: {text}"
    return f"HTTP {status}: {document}"
