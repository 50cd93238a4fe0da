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
anything (read as ``importlib.metadata`` reads it, without importing that
either: :func:`installed_entry_points`); an entry point's module is imported when it is used (so that
``mesoslike run --help`` imports the command framework, not the Fuxi
scheduler). As :func:`~mesoslike.allocator.register_sorter` does for
sorters, :func:`register` adds one by hand (tests, embedding programs);
a registered one hides an installed one of the same name.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import threading
from typing import Any

from mesoslike.errors import MesoslikeError

__all__ = ["COMMANDS", "SIMULATION_POLICIES", "LOCAL", "GROUPS", "PluginError", "names", "load", "register",
           "unregister", "installed_entry_points"]

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
            for name, value in installed_entry_points(group):
                if name in found and found[name] != value:
                    log.warning("two %s plugins named %r (%s, %s): the first is used", group, name, found[name],
                                value)
                    continue
                found[name] = value
            _found[group] = found
        return found


def installed_entry_points(group: str) -> list[tuple[str, str]]:
    """(name, value) of the installed entry points of ``group``, in the
    order ``importlib.metadata.entry_points(group=group)`` gives them."""
    found = _scan_entry_points(group)
    if found is None:   # what the scan does not read: importlib.metadata does
        import importlib.metadata

        found = [(entry.name, entry.value) for entry in importlib.metadata.entry_points(group=group)]
    return found


def _scan_entry_points(group: str) -> list[tuple[str, str]] | None:
    """What ``importlib.metadata.entry_points(group=group)`` finds, read
    the way it reads it — every ``*.dist-info`` and ``*.egg-info`` of each
    ``sys.path`` directory in turn, the first distribution of a name
    hiding later ones, their ``entry_points.txt`` — without importing it:
    ``importlib.metadata`` brings ``email``, ``zipfile`` and ``csv``, ~15
    ms of every ``mesoslike run``'s start (docs/performance.rst, "mesoslike
    run on mesoslike local"). None for what only it reads (a zip archive
    or an egg on the path, an import hook that lists distributions of its
    own, a line it would refuse): the caller asks it then."""
    from importlib.machinery import PathFinder

    if any(finder is not PathFinder and callable(getattr(finder, "find_distributions", None))
           for finder in sys.meta_path):
        return None
    seen: set[str] = set()
    found: list[tuple[str, str]] = []
    for root in sys.path:
        if not isinstance(root, str):
            return None
        if root.lower().endswith(".egg"):
            return None
        try:
            children = os.listdir(root or ".")
        except NotADirectoryError:   # a zip archive
            return None
        except OSError:   # not there (yet): nothing to find in it
            continue
        distributions: dict[str, list[str]] = {}   # normalized name -> its metadata directories, in listing order
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                name = re.sub(r"[-_.]+", "_", low.rpartition(".")[0].partition("-")[0])
                distributions.setdefault(name, []).append(child)
        for name, directories in distributions.items():
            if name in seen:
                continue
            seen.add(name)
            try:
                with open(os.path.join(root, directories[0], "entry_points.txt"), encoding="utf-8") as file:
                    text = file.read()
            except (OSError, UnicodeDecodeError):   # none (or unreadable): no entry points
                continue
            section = None
            for line in map(str.strip, text.splitlines()):
                if not line or line.startswith("#"):
                    continue
                if line.startswith("[") and line.endswith("]"):
                    section = line.strip("[]")
                elif section is None:
                    continue   # before any section: importlib.metadata skips it too
                elif "=" not in line:
                    return None   # importlib.metadata refuses it: let it say so
                elif section == group:
                    name_part, _, value = line.partition("=")
                    found.append((name_part.strip(), value.strip()))
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
