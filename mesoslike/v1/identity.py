"""Who a v1 request comes from: its ``Authorization`` header, checked
against the cluster's credentials (docs/mesos-api.rst, "Identity"). Pure.

Mesos's HTTP authenticators take HTTP Basic (a principal and its secret)
and bearer tokens. mesoslike principals are CURVE keys, and may hold an
HTTP bearer token (the credentials file's ``token``): that token is the
principal's HTTP secret. So ``Authorization: Basic base64(NAME:TOKEN)`` is
principal NAME when TOKEN is NAME's token (what pymesos sends for
``principal=NAME, secret=TOKEN``), and ``Authorization: Bearer TOKEN`` is
whichever principal holds TOKEN. Without credentials (an anonymous,
loopback-only cluster) nobody is asked, as on the ZeroMQ side.
"""

from __future__ import annotations

import binascii
import hmac

from mesoslike.acl import Credentials
from mesoslike.v1.calls import CallError

__all__ = ["authenticate", "CHALLENGE"]

#: what a 401 asks for
CHALLENGE = {"WWW-Authenticate": 'Basic realm="mesos", Bearer realm="mesos"'}
_MAX_HEADER = 8192


def authenticate(authorization: str | None, credentials: Credentials | None) -> str | None:
    """The principal an ``Authorization`` header proves (None: an anonymous
    cluster, where nobody is asked); CallError 401 when credentials are
    needed and the header proves nobody."""
    if credentials is None:
        return None
    scheme, _, value = (authorization or "").strip()[:_MAX_HEADER].partition(" ")
    value = value.strip()
    principal: str | None = None
    if scheme.lower() == "bearer" and value:
        principal = credentials.principal_of_token(value)
    elif scheme.lower() == "basic" and value:
        try:
            name, colon, secret = binascii.a2b_base64(value).decode("utf-8").partition(":")
        except (binascii.Error, ValueError):
            raise CallError(401, "Malformed 'Authorization' header: Basic credentials are base64 of NAME:SECRET") \
                from None
        found = credentials.principals.get(name) if colon else None
        if found is not None and found.token and hmac.compare_digest(found.token.encode(), secret.encode()):
            principal = name
    if principal is None:
        raise CallError(401, "Unauthorized: give 'Authorization: Basic' with a principal and its token, or "
                             "'Authorization: Bearer' with a token (docs/mesos-api.rst)")
    return principal
