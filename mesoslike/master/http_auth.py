"""Who may use the master's HTTP endpoints (docs/security.rst): with
credentials, operator writes need ``Authorization: Bearer TOKEN`` of a
principal the write's ACL allows (401 without a valid token, 403 without
the permission); with ``http_auth="all"`` reads need a valid token too. An
anonymous (loopback) master asks nothing. The authenticated principal goes
with the request to its handler (:attr:`mesoslike.http_server.Request.principal`).
"""

from __future__ import annotations

import logging
from typing import Collection, Mapping

import attrs

from mesoslike.acl import Credentials
from mesoslike.errors import ConfigError

__all__ = ["HTTPAuthorization", "HTTPRefusal", "HTTP_AUTH"]

log = logging.getLogger("mesoslike.master")

#: what HTTP asks a token for (docs/security.rst)
HTTP_AUTH = ("writes", "all")


@attrs.frozen
class HTTPRefusal:
    """Answer ``status`` (401 or 403) with ``message``."""

    status: int
    message: str


class HTTPAuthorization:
    """The master's HTTP authorization. ``permissions``: the ACL permission
    each POST path needs (others: ``update_quota``); ``exempt``: paths whose
    handlers identify their callers themselves (the v1 APIs).
    :attr:`refused` counts the refusals by status (/metrics)."""

    def __init__(self, credentials: Credentials | None, http_auth: str = "writes", *,
                 permissions: Mapping[str, str], exempt: Collection[str] = ()) -> None:
        if http_auth not in HTTP_AUTH:
            raise ConfigError(f"bad http_auth {http_auth!r}: expected one of {', '.join(HTTP_AUTH)}")
        self.credentials = credentials
        self.http_auth = http_auth
        self._permissions = dict(permissions)
        self._exempt = frozenset(exempt)
        #: HTTP requests refused for want of a valid token (401) or a permission (403)
        self.refused = {401: 0, 403: 0}

    def principal_of(self, authorization: str | None) -> str | None:
        """The principal whose bearer token ``authorization`` carries (None:
        an anonymous master, or no valid token)."""
        credentials = self.credentials
        scheme, _, token = (authorization or "").partition(" ")
        if credentials is None or scheme.lower() != "bearer":
            return None
        return credentials.principal_of_token(token.strip())

    def authorize(self, method: str, path: str, authorization: str | None) -> HTTPRefusal | str | None:
        """The refusal of a request, else its caller's principal (None: anonymous, or not asked)."""
        credentials = self.credentials
        if credentials is None or path in self._exempt:
            return None
        principal = self.principal_of(authorization)
        if method == "GET" and self.http_auth == "writes":
            return principal
        refusal: HTTPRefusal | None = None
        if principal is None:
            refusal = HTTPRefusal(401, "a valid operator token is needed: Authorization: Bearer TOKEN")
        elif method == "POST":
            permission = self._permissions.get(path, "update_quota")
            if not credentials.allows(permission, principal):
                refusal = HTTPRefusal(403, f"not authorized: principal {principal} lacks the {permission} permission")
        if refusal is None:
            return principal
        self.refused[refusal.status] += 1
        log.warning("HTTP %s %s refused (%d): %s", method, path[:200], refusal.status, refusal.message)
        return refusal
