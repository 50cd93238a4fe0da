"""A task's environment, made from nothing (docs/framework-api.rst, "The
task's environment"): never the agent's own, which may hold the operator's
keys and tokens (``MESOSLIKE_KEY``, ``MESOSLIKE_TOKEN``, ...). Pure.

In the order later ones win:

1. a minimal base: ``PATH`` (:data:`DEFAULT_PATH`, or the operator's
   ``--executor-environment-variables``, which replace the whole base), and
   ``HOME``, ``USER``, ``LOGNAME`` of the user the task runs as (with
   ``--switch-user`` the supervisor sets them from that user's entry);
2. what the framework gave (``TaskInfo.environment``);
3. the task's secret variables (``TaskInfo.environment_secrets``), added
   by its supervisor only (:mod:`.secrets`);
4. the task's own variables (:func:`task_variables`), which nothing
   overrides.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["DEFAULT_PATH", "TASK_VARIABLES", "task_variables", "base_environment", "task_environment",
           "user_entry_environment"]

#: ``PATH`` of a task when the operator sets none (Mesos's default for its tasks)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: every variable a task gets from its agent, named once for the docs and the tests
TASK_VARIABLES = ("MESOS_SANDBOX", "MESOS_TASK_ID", "MESOS_FRAMEWORK_ID", "MESOS_AGENT_ID", "MESOS_EXECUTOR_ID",
                  "MESOSLIKE_SANDBOX", "MESOSLIKE_TASK_ID", "MESOSLIKE_FRAMEWORK_ID", "MESOSLIKE_AGENT_ID")


def task_variables(framework_id: str, task_id: str, agent_id: str, sandbox: str, executor_id: str = "") -> dict[str, str]:
    """Mesos's and our names of the task's identity and sandbox.
    ``MESOS_EXECUTOR_ID`` is the custom executor's id for an executor's
    process, and the task's id for a command task (Mesos's command executor
    has its task's id)."""
    return {"MESOS_SANDBOX": sandbox, "MESOS_TASK_ID": task_id, "MESOS_FRAMEWORK_ID": framework_id,
            "MESOS_AGENT_ID": agent_id, "MESOS_EXECUTOR_ID": executor_id or task_id,
            "MESOSLIKE_SANDBOX": sandbox, "MESOSLIKE_TASK_ID": task_id, "MESOSLIKE_FRAMEWORK_ID": framework_id,
            "MESOSLIKE_AGENT_ID": agent_id}


def user_entry_environment(name: str, home: str) -> dict[str, str]:
    """``HOME``, ``USER`` and ``LOGNAME`` of a unix user."""
    return {"HOME": home, "USER": name, "LOGNAME": name}


def base_environment(operator: Mapping[str, str] | None, user: Mapping[str, str] | None) -> dict[str, str]:
    """The base every task starts from: the operator's variables (or a
    ``PATH`` of :data:`DEFAULT_PATH`), then ``user``'s ``HOME``/``USER``/``LOGNAME``
    (None: the supervisor sets the switched user's)."""
    base = dict(operator) if operator is not None else {"PATH": DEFAULT_PATH}
    base.update(user or {})
    return base


def task_environment(base: Mapping[str, str], framework: Mapping[str, str], variables: Mapping[str, str]) -> dict[str, str]:
    """``base``, then the framework's ``TaskInfo.environment``, then the
    task's own ``variables`` (:func:`task_variables` and, for a custom
    executor, its channel's): a task's environment without its secrets."""
    environment = dict(base)
    environment.update(framework)
    environment.update(variables)
    return environment

