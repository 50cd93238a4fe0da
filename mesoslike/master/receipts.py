"""Receipts: the master's signed word that an id belongs to a principal.

A secured master binds each framework id and agent id to the principal
that registered it (docs/security.rst). With a registry (``--work-dir`` or
ZooKeeper) a new leader reads those bindings; a master without one — or
whose registry was lost — would otherwise have to take the word of whoever
comes first. So the master gives the bindings to the parties that outlive
it, signed: an agent gets a receipt for its own id in AGENT_REGISTERED and
shows it again in REREGISTER_AGENT; each framework's receipt rides in its
``FrameworkInfo`` (``principal_receipt``), which agents checkpoint with
the framework's tasks and report when they re-register. A receipt is
HMAC-SHA256 over (kind, id, principal) under a key derived from the
master's CURVE secret key, which every master of an HA group shares; it
binds exactly that id to exactly that principal, so it is not secret — a
peer holding someone else's receipt can only confirm that someone else's
binding. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["receipt_key", "sign", "verify", "AGENT", "FRAMEWORK"]

#: what a receipt is for (part of what is signed: an agent's receipt is never a framework's)
AGENT = "agent"
FRAMEWORK = "framework"
#: hex characters of a receipt (128 bits of the HMAC)
_LENGTH = 32


def receipt_key(master_secret: bytes) -> bytes:
    """The receipt key of the master whose CURVE secret key (z85) is
    ``master_secret``: masters sharing the key pair share it."""
    return hashlib.sha256(b"mesoslike receipts v1\0" + master_secret).digest()


def sign(key: bytes, kind: str, ident: str, principal: str) -> str:
    """The receipt binding ``ident`` (of ``kind``) to ``principal``."""
    message = "\0".join((kind, ident, principal)).encode("utf-8", "surrogatepass")
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:_LENGTH]


def verify(key: bytes, kind: str, ident: str, principal: str, receipt: str) -> bool:
    """Whether ``receipt`` is this master's for ``ident`` and ``principal``
    (constant time; an empty or malformed receipt is not)."""
    if not principal or not isinstance(receipt, str) or len(receipt) != _LENGTH:
        return False
    return hmac.compare_digest(sign(key, kind, ident, principal), receipt)
