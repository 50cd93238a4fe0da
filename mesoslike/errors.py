"""One error hierarchy for everything mesoslike raises on bad input.

Every error a caller can provoke with bad input derives from
:class:`MesoslikeError`, so ``except MesoslikeError`` catches them all. Most
also derive from the matching built-in (``ValueError`` for malformed values,
``LookupError`` for unknown ids) so generic handlers keep working.

An operation that raises one of these errors has changed nothing: the core
validates before it mutates.
"""

from __future__ import annotations


class MesoslikeError(Exception):
    """Base class of every error raised on bad input."""


class ResourcesError(MesoslikeError, ValueError):
    """A malformed resource string, a negative/NaN/infinite quantity, a bad
    port range, or a subtraction that would go negative."""


class ConfigError(MesoslikeError, ValueError):
    """A malformed configuration value (flag, environment variable, file)."""


class AllocatorError(MesoslikeError):
    """Base class of the errors the allocator raises."""


class UnknownAgentError(AllocatorError, LookupError):
    """The agent id is not known to the allocator."""


class UnknownFrameworkError(AllocatorError, LookupError):
    """The framework id is not known to the allocator."""


class UnknownOfferError(AllocatorError, LookupError):
    """The offer id is not outstanding (never made, answered, or rescinded)."""


class DuplicateAgentError(AllocatorError, ValueError):
    """An agent with this id was already added."""


class DuplicateFrameworkError(AllocatorError, ValueError):
    """A framework with this id was already added."""


class InvalidRoleError(AllocatorError, ValueError):
    """A role name that is not a valid role path (see ``validate_role``)."""


class InvalidFilterError(AllocatorError, ValueError):
    """A negative or non-finite ``refuse_seconds``."""


class RecoveryError(AllocatorError, ValueError):
    """Resources recovered (or accepted) that the framework does not hold on
    that agent: recovering more than was offered."""


class QuotaError(AllocatorError, ValueError):
    """An invalid quota: guarantee above limit, or children's guarantees above
    their parent's."""


class WeightError(AllocatorError, ValueError):
    """A role weight that is not a finite number > 0."""


class AgentCapacityError(AllocatorError, ValueError):
    """An agent update that would shrink its total below what is allocated."""
