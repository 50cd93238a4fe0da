"""The master's side of fair-share preemption (docs/preemption.rst): the
policy's inputs taken from the soft state each round, and its actions
carried out — warnings to frameworks, kills, roles preferred on agents. The
policy itself is :class:`mesoslike.master.preemption.FairSharePreemption`
(pure).
"""

from __future__ import annotations

import logging

from mesoslike.master.context import CoreContext
from mesoslike.master.preemption import FairSharePreemption, Kill, Prefer, RoleUsage, TaskView, Warn
from mesoslike.master.records import clip
from mesoslike.master.roles import RolesConfig
from mesoslike.resources import Resources
from mesoslike.wire import TaskState
from mesoslike.wire import messages as m

__all__ = ["Preempting"]

log = logging.getLogger("mesoslike.master")


class Preempting:
    """Runs the policy, if on (:attr:`policy`; None = off, the default)."""

    def __init__(self, context: CoreContext) -> None:
        self._context = context
        self.policy: FairSharePreemption | None = None
        self.next_update = context.clock.now()
        #: (framework, task) warned -> the role it goes to
        self.warned: dict[tuple[str, str], str] = {}
        #: (framework, task) killed by preemption -> why (its TASK_KILLED says so)
        self.preempting: dict[tuple[str, str], str] = {}

    def configure(self, settings: RolesConfig | None) -> None:
        """Turn fair-share preemption on with the roles file ``settings``,
        update its settings, or turn it off (None, or a file with preemption
        disabled: the policy and its pending victims are dropped)."""
        if settings is None or not settings.preemption.enabled:
            if self.policy is not None:
                log.info("fair-share preemption off")
            self.policy = None
            self.warned.clear()
            self.preempting.clear()
            return
        if self.policy is None:
            self.policy = FairSharePreemption(settings, allocation_interval=self._context.config.allocation_interval)
            self.next_update = self._context.clock.now()
            log.info("fair-share preemption on (wait before kill %.1fs)", settings.preemption.wait_before_kill)
        else:
            self.policy.set_settings(settings)

    def tick(self, now: float) -> None:
        """A round of the policy, if one is due."""
        if self.policy is not None and now >= self.next_update:
            self.next_update = now + self.policy.update_interval
            self._update(self.policy, now)

    def next_wakeup(self) -> float:
        return self.next_update if self.policy is not None else float("inf")

    def _update(self, policy: FairSharePreemption, now: float) -> None:
        """One round of the policy (every ``update_interval``): its inputs
        from the soft state, then its actions. O(tasks + offers + agents).

        Demand: frameworks do not state what they still want (as in Mesos),
        so a role with a connected framework that is not suppressed wants
        the whole cluster on top of what it holds; a role whose frameworks
        are all suppressed or disconnected wants nothing more."""
        context = self._context
        context.settle()
        total = Resources.sum(agent.info.resources for agent in context.agents.records.values())
        usage: dict[str, list[Resources]] = {}
        wanting: set[str] = set()
        tasks: list[TaskView] = []
        for record in context.frameworks.records.values():
            role = record.info.role
            held = usage.setdefault(role, [])
            if record.connected and not record.suppressed:
                wanting.add(role)
            for task in record.tasks.values():
                if not task.terminal and task.state != TaskState.UNREACHABLE:   # on an agent out of reach
                    held.append(task.info.resources)
                    tasks.append(TaskView(task.id, record.id, role, task.agent_id, task.info.resources,
                                          task.launched_at))
            held.extend(offer.resources for offer in context.allocator.outstanding_offers(record.id))
        roles = {}
        for role, held in usage.items():
            used = Resources.sum(held)
            roles[role] = RoleUsage(used, used + total if role in wanting else used)
        for key in [key for key in self.warned if not self._running(key)]:
            self.ended(key)  # ended without a status (framework removed, ...)
        try:
            actions = policy.update(now, total, roles, tasks)
        except Exception:  # a bug in the policy must not stop the master
            log.exception("fair-share preemption: the update failed")
            return
        for action in actions:
            if isinstance(action, Warn):
                self._warn(action, now)
            elif isinstance(action, Kill):
                self._kill(action)
            elif isinstance(action, Prefer):
                if action.agent_id in context.agents.records:
                    context.allocator.prefer_role(action.agent_id, action.role, action.until)

    def _running(self, key: tuple[str, str]) -> bool:
        found = self._context.frameworks.task(*key)
        return found is not None and not found[1].terminal

    def _warn(self, action: Warn, now: float) -> None:
        context = self._context
        record = context.frameworks.get(action.framework_id)
        for task_id in action.task_ids:
            self.warned[(action.framework_id, task_id)] = action.role_for
        context.counters["preemptions_warned"] += len(action.task_ids)
        log.info("preemption: warning framework %s that tasks %s will be killed in %.1fs for role %s",
                 action.framework_id, clip(", ".join(action.task_ids)), action.deadline - now, action.role_for)
        if record is not None and record.connected:
            context.out.send_framework(record, m.PreemptionWarning(list(action.task_ids),
                                                                   max(0.0, action.deadline - now), action.role_for))

    def _kill(self, action: Kill) -> None:
        context = self._context
        found = context.frameworks.task(action.framework_id, action.task_id)
        if found is None or found[1].terminal:
            return
        record, task = found
        self.preempting[(record.id, task.id)] = action.reason
        context.counters["preemptions_killed"] += 1
        log.info("preemption: killing task %s of framework %s: %s", clip(task.id), record.id, action.reason)
        agent = context.agents.get(task.agent_id)
        if agent is not None:
            context.out.send(agent.peer, m.KillTask(record.id, task.id))

    def ended(self, key: tuple[str, str], agent_id: str | None = None) -> None:
        """A warned task ended: tell the policy, count it, and have its
        agent offered to the role it was taken for at once (the policy's own
        Prefer comes with its next update, after the allocator may have
        offered the agent elsewhere)."""
        context = self._context
        role_for = self.warned.pop(key)
        if self.preempting.pop(key, None) is None:
            context.counters["preemptions_released"] += 1
        if self.policy is None:
            return
        self.policy.task_gone(*key)
        if agent_id is not None and agent_id in context.agents.records:
            context.allocator.prefer_role(agent_id, role_for, context.clock.now() + self.policy.prefer_for)
