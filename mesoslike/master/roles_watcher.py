"""The roles file in a running master (docs/roles.rst): applied to every
core the master leads with, read again when it changes or when asked.

:class:`RolesWatcher` is driven by the master's loop: :meth:`RolesWatcher.turn`
once per turn, under the master's lock, with the core it leads with (None for
a follower, which reads the file too, so that it takes over with what is
current). It looks at the file's modification time, size and inode every
``check_interval`` seconds of the injected clock, and at once after
:meth:`RolesWatcher.reload` (SIGHUP).
"""

from __future__ import annotations

import logging
import os

from mesoslike.clock import Clock
from mesoslike.errors import MesoslikeError
from mesoslike.master.core import MasterCore, Send
from mesoslike.master.roles import RoleConfig, RolesConfig, RolesFileError, load_roles_file, quantities

__all__ = ["RolesWatcher", "CHECK_INTERVAL"]

log = logging.getLogger("mesoslike.master")

#: how often the roles file's modification time is looked at (s)
CHECK_INTERVAL = 2.0

#: what identifies a version of the file without reading it
_Stat = tuple[int, int, int]


class RolesWatcher:
    """Keeps ``config`` (None: no roles file) in force.

    ``looks`` counts the times the file's stat was compared (what tests wait
    for instead of sleeping); ``reloads_pending`` is true from a
    :meth:`reload` until the turn that handles it.
    """

    def __init__(self, config: RolesConfig | None, clock: Clock, check_interval: float = CHECK_INTERVAL) -> None:
        self.config = config
        self._clock = clock
        self._check_interval = check_interval
        self._check_at = clock.now() + check_interval
        self._stat = self._file_stat()
        self._applied_to: MasterCore | None = None   # the core the settings were last applied to
        self._applied: RolesConfig | None = None     # what was applied last (its roles get defaults once dropped)
        self._asked = self._handled = 0              # reload() calls, and those handled
        self.looks = 0

    @property
    def reloads_pending(self) -> bool:
        return self._asked != self._handled

    def reload(self) -> None:
        """Read the file again at the next turn, even if it looks unchanged.
        Signal-safe (no lock: a signal handler may run it on the loop's own
        thread); the caller wakes the loop."""
        self._asked += 1

    def turn(self, core: MasterCore | None) -> list[Send]:
        """Look at the file when asked, on a take-over or every
        ``check_interval``; apply what is new to ``core`` (the leader's; None
        for a follower). Returns what the core has to send."""
        if self.config is None:
            return []
        asked_count = self._asked
        asked = asked_count != self._handled
        now = self._clock.now()
        taking_over = core is not None and core is not self._applied_to
        if self.config.path and (asked or taking_over or now >= self._check_at):
            self._handled = asked_count
            self._check_at = now + self._check_interval
            self._read(asked)
        if core is not None and core is not self._applied_to:
            return self.apply(core)
        return []

    def _file_stat(self) -> _Stat | None:
        path = self.config.path if self.config is not None else None
        if not path:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _read(self, asked: bool) -> None:
        self.looks += 1
        stat = self._file_stat()
        if stat == self._stat and not asked:
            return
        self._stat = stat
        assert self.config is not None and self.config.path is not None
        try:
            config = load_roles_file(self.config.path)
        except RolesFileError as exc:
            log.error("roles file not reloaded, the roles in force stay: %s", exc)
            return
        if config != self.config:
            log.info("roles file %s reloaded: %d roles", config.path, len(config.roles))
        # applied again even if unchanged: what an operator set since for a
        # listed role gives way to the file (only what differs changes)
        self.config, self._applied_to = config, None

    def apply(self, core: MasterCore) -> list[Send]:
        """Make the allocator (and the registry) hold the file's weights and
        quota for every role it lists — the file wins — and the defaults
        (weight 1, no quota) for roles an earlier version listed and this one
        dropped. Only what differs is changed. Returns what the core has to send."""
        config = self.config
        if config is None:
            return []
        core.roles_config = config
        self._applied_to = core
        try:
            core.set_preemption(config)
        except (MesoslikeError, ValueError) as exc:
            log.error("roles file: the preemption settings could not be applied: %s", exc)
        dropped = set(self._applied.roles if self._applied else ()) - set(config.roles)
        self._applied = config
        wanted = {role: config.effective(role) for role in [*config.roles, *sorted(dropped)]}  # dropped: defaults
        return self._apply_weights(core, wanted) + self._apply_quota(core, wanted)

    @staticmethod
    def _apply_weights(core: MasterCore, wanted: dict[str, RoleConfig]) -> list[Send]:
        weights = {role: c.weight for role, c in wanted.items()
                   if c.weight is not None and core.registry.weights.get(role, 1.0) != c.weight}
        if not weights:
            return []
        try:
            return core.update_weights(weights)
        except MesoslikeError as exc:
            log.error("roles file: the weights could not be applied: %s", exc)
            return []

    @staticmethod
    def _apply_quota(core: MasterCore, wanted: dict[str, RoleConfig]) -> list[Send]:
        sends: list[Send] = []
        pending = [c for _, c in sorted(wanted.items()) if not _same_quota(core.registry.quota.get(c.name, {}), c)]
        # in several passes: lowering a parent's guarantee may have to wait
        # for its children's, raising a child's for its parent's
        while pending:
            failed: list[tuple[RoleConfig, MesoslikeError]] = []
            for c in pending:
                try:
                    sends += core.update_quota(c.name, c.guarantee, c.limit)
                except MesoslikeError as exc:
                    failed.append((c, exc))
            if len(failed) == len(pending):
                for c, error in failed:
                    log.error("roles file: the quota of role %s could not be applied: %s", c.name, error)
                break
            pending = [c for c, _ in failed]
        return sends


def _same_quota(record: dict, config: RoleConfig) -> bool:
    return all(quantities(record.get(part)) == quantities(getattr(config, part)) and
               (record.get(part) is None) == (getattr(config, part) is None) for part in ("guarantee", "limit"))
