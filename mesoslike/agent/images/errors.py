"""The one error of the image provisioner: what went wrong (a kind a
program can test) and a message a person can act on, naming the image.

A task whose image cannot be provisioned ends ``TASK_FAILED`` with
``REASON_CONTAINER_LAUNCH_FAILED`` and this message, so the message says
which image and why, without a traceback."""

from __future__ import annotations

__all__ = ["ImageError", "BAD_NAME", "NOT_FOUND", "UNAUTHORIZED", "UNREACHABLE", "DIGEST_MISMATCH", "TOO_LARGE",
           "BAD_IMAGE", "UNSUPPORTED", "CREDENTIALS", "CACHE", "KINDS"]

#: the reference does not parse (``Bad Name!``, an unknown digest algorithm)
BAD_NAME = "bad_name"
#: the registry has no such repository, tag or blob (HTTP 404)
NOT_FOUND = "not_found"
#: the registry refused the credentials, or wants some and none are configured (HTTP 401/403)
UNAUTHORIZED = "unauthorized"
#: no connection, TLS failure, timeout, or an HTTP 5xx
UNREACHABLE = "unreachable"
#: bytes whose sha256 (or size) is not the one their descriptor promised
DIGEST_MISMATCH = "digest_mismatch"
#: a manifest, config, layer or the whole image over its bound
TOO_LARGE = "too_large"
#: a malformed manifest, config or layer (a tar member escaping its layer, bad JSON, ...)
BAD_IMAGE = "bad_image"
#: valid but not something we run (schema 1 manifests, foreign layers, no linux/<arch> image)
UNSUPPORTED = "unsupported"
#: the credentials file (``--docker-config``) is unreadable, malformed or readable by others
CREDENTIALS = "credentials"
#: the agent's own image cache failed (disk full, permissions)
CACHE = "cache"
KINDS = (BAD_NAME, NOT_FOUND, UNAUTHORIZED, UNREACHABLE, DIGEST_MISMATCH, TOO_LARGE, BAD_IMAGE, UNSUPPORTED,
         CREDENTIALS, CACHE)


class ImageError(Exception):
    """An image could not be provisioned. ``kind`` is one of :data:`KINDS`,
    ``cause`` says why in words, ``image`` is the reference as the user
    wrote it (or its canonical form) once known."""

    def __init__(self, kind: str, cause: str, image: str = "") -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown image error kind {kind!r}")
        self.kind, self.cause, self.image = kind, cause, image
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return f"image {self.image}: {self.cause}" if self.image else self.cause

    def __str__(self) -> str:
        return self.message

    def naming(self, image: str) -> ImageError:
        """This error, naming ``image`` (unless it already names one)."""
        return self if self.image else ImageError(self.kind, self.cause, image)
