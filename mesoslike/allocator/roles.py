"""Role names: ``*`` (the default role) or a slash-separated path such as
``eng/prod``, with Mesos's naming rules."""

from __future__ import annotations

from functools import lru_cache

from mesoslike.errors import InvalidRoleError

__all__ = ["DEFAULT_ROLE", "validate_role", "ancestors", "lineage"]

DEFAULT_ROLE = "*"
_FORBIDDEN = set("\x7f*") | {chr(c) for c in range(32)}


def validate_role(role: object) -> str:
    """Return ``role`` if valid, else raise :class:`InvalidRoleError`.

    Valid: ``*``; or non-empty components joined by ``/`` where no component
    is ``.`` or ``..``, starts with ``-``, or holds whitespace, control
    characters or ``*``.
    """
    if not isinstance(role, str) or not role:
        raise InvalidRoleError(f"role must be a non-empty string, got {role!r}")
    if role == DEFAULT_ROLE:
        return role
    for part in role.split("/"):
        if not part:
            raise InvalidRoleError(f"bad role {role!r}: empty path component (leading, trailing or double '/')")
        if part in (".", ".."):
            raise InvalidRoleError(f"bad role {role!r}: component {part!r} is reserved")
        if part.startswith("-"):
            raise InvalidRoleError(f"bad role {role!r}: a component may not start with '-'")
        if any(ch.isspace() or ch in _FORBIDDEN for ch in part):
            raise InvalidRoleError(f"bad role {role!r}: whitespace, control characters and '*' are not allowed")
    return role


def ancestors(role: str) -> list[str]:
    """``"a/b/c"`` -> ``["a/b/c", "a/b", "a"]`` (the role first)."""
    parts = role.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


@lru_cache(maxsize=4096)
def lineage(role: str) -> tuple[str, ...]:
    """``ancestors(role)`` as a tuple, cached: quota checks walk it on the
    allocation path, and a cluster has few distinct roles."""
    return tuple(ancestors(role))
