"""What other distributions add to mesoslike, found through Python entry
points (``importlib.metadata``) rather than imported by name.

The bundled frameworks (the ``mesoslike_frameworks`` import package) sit
*above* mesoslike: they use its public API, and nothing in ``mesoslike``
imports them. The command line and the simulator find what the frameworks
offer through these groups, declared in the distribution's metadata
(``setup.cfg``, ``[options.entry_points]``) — the way a third party's
package would add its own:

=================================  ===============================================================
group                              an entry point is
=================================  ===============================================================
``mesoslike.commands``             a click command or group: ``mesoslike NAME`` (``fuxi``, ``run``,
                                   ``services``, ``app``, ``deployment``)
``mesoslike.simulation_policies``  a :class:`mesoslike.sim.policies.SimulationPolicy`:
                                   ``mesoslike simulate --policy NAME`` (``fuxi-fifo``, ``fuxi-fair``)
``mesoslike.local``                something ``mesoslike local`` starts beside the cluster
                                   (``services``: the service scheduler of ``--services``)
=================================  ===============================================================

Lazy: the names come from the installed metadata without importing
anything; an entry point's module is imported when it is used (so that
``mesoslike run --help`` imports the command framework, not the Fuxi
scheduler). As :func:`~mesoslike.allocator.register_sorter` does for
sorters, :func:`register` adds one by hand (tests, embedding programs);
a registered one hides an installed one of the same name.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import threading
from typing import Any

from mesoslike.errors import MesoslikeError

__all__ = ["COMMANDS", "SIMULATION_POLICIES", "LOCAL", "GROUPS", "PluginError", "names", "load", "register",
           "unregister"]

log = logging.getLogger("mesoslike.plugins")

COMMANDS = "mesoslike.commands"
SIMULATION_POLICIES = "mesoslike.simulation_policies"
LOCAL = "mesoslike.local"
GROUPS = (COMMANDS, SIMULATION_POLICIES, LOCAL)

_lock = threading.Lock()
#: group -> name -> "module:attribute" (installed) or the object itself (registered)
_found: dict[str, dict[str, Any]] = {}
#: group -> name -> loaded object
_loaded: dict[str, dict[str, Any]] = {}


class PluginError(MesoslikeError, LookupError):
    """No plugin of that name in that group, or one that does not load."""


def _group(group: str) -> dict[str, Any]:
    if group not in GROUPS:
        raise PluginError(f"unknown plugin group {group!r}; known: {', '.join(GROUPS)}")
    with _lock:
        found = _found.get(group)
        if found is None:
            found = {}
            for entry in importlib.metadata.entry_points(group=group):
                if entry.name in found and found[entry.name] != entry.value:
                    log.warning("two %s plugins named %r (%s, %s): the first is used", group, entry.name,
                                found[entry.name], entry.value)
                    continue
                found[entry.name] = entry.value
            _found[group] = found
        return found


def names(group: str) -> list[str]:
    """The plugins of ``group``, in the order they were declared (nothing is imported)."""
    return list(_group(group))


def load(group: str, name: str) -> Any:
    """The plugin ``name`` of ``group``, its module imported on first use.
    Raises :class:`PluginError` for an unknown name or one that fails to load."""
    found = _group(group)
    loaded = _loaded.setdefault(group, {})
    if name in loaded:
        return loaded[name]
    target = found.get(name)
    if target is None:
        raise PluginError(f"no {group} plugin named {name!r}; known: {', '.join(found) or 'none'}")
    if isinstance(target, str):
        module_name, _, attribute = target.partition(":")
        try:
            target = importlib.import_module(module_name.strip())
            for part in attribute.strip().split(".") if attribute else ():
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"the {group} plugin {name!r} ({found[name]}) does not load: {exc}") from exc
    loaded[name] = target
    return target


def register(group: str, name: str, plugin: Any) -> None:
    """Add ``plugin`` as ``name`` of ``group`` (hiding an installed one of that name)."""
    found = _group(group)
    with _lock:
        found[name] = plugin
        _loaded.setdefault(group, {})[name] = plugin


def unregister(group: str, name: str) -> None:
    """Forget ``name`` of ``group`` (what :func:`register` added, or an installed one)."""
    found = _group(group)
    with _lock:
        found.pop(name, None)
        _loaded.get(group, {}).pop(name, None)
