"""The role tree: roles as paths (``eng`` is the parent of ``eng/prod``),
each with how many frameworks sit in it and what its whole subtree consumes.

Mesos keeps the same structure (``RoleTree``) so that quota, which covers a
role's subtree, is charged in O(depth) per allocation instead of by scanning
every framework. Here a node exists exactly while its subtree holds a
framework; consumption (offered + used scalars, in thousandths) is tracked
only while someone reads it — the allocator turns tracking on while some
role has quota, and then rebuilds it once from what frameworks hold.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from mesoslike.allocator.millis import Millis, add_millis
from mesoslike.allocator.roles import lineage

__all__ = ["RoleTree"]


class _RoleNode:
    __slots__ = ("path", "parent", "children", "frameworks", "consumed", "lineage")

    def __init__(self, path: str, parent: _RoleNode | None) -> None:
        self.path = path
        self.parent = parent
        self.children = 0                 # child nodes (roles below with frameworks)
        self.frameworks = 0               # frameworks in this very role
        self.consumed: Millis = {}        # whole subtree, while tracking
        self.lineage = lineage(path)      # the role first, then its ancestors


class RoleTree:
    """Roles with frameworks, their ancestors, and subtree consumption.

    Complexity: adding or removing a framework and charging an allocation
    cost O(depth · kinds); ``consumed``, ``has_frameworks`` are O(1) and
    ``in_subtree`` O(depth).
    """

    def __init__(self) -> None:
        self._nodes: dict[str, _RoleNode] = {}
        self._tracking = False

    # ------------------------------------------------------------ membership
    def add_framework(self, role: str) -> None:
        """A framework joined ``role``: the role and its ancestors exist."""
        self._node(role).frameworks += 1

    def _node(self, role: str) -> _RoleNode:
        node = self._nodes.get(role)
        if node is None:
            parent = self._node(role.rpartition("/")[0]) if "/" in role else None
            if parent is not None:
                parent.children += 1
            node = self._nodes[role] = _RoleNode(role, parent)  # a new node holds nothing yet
        return node

    def remove_framework(self, role: str) -> None:
        """A framework left ``role`` (holding nothing any more): nodes whose
        subtree is left without frameworks go."""
        node: _RoleNode | None = self._nodes[role]
        assert node is not None
        node.frameworks -= 1
        while node is not None and node.frameworks == 0 and node.children == 0:
            del self._nodes[node.path]
            parent = node.parent
            if parent is not None:
                parent.children -= 1
            node = parent

    def has_frameworks(self, role: str) -> bool:
        """Whether some framework sits in ``role`` or below it. O(1)."""
        return role in self._nodes

    def in_subtree(self, role: str, top: str) -> bool:
        """Whether ``role`` (a role with frameworks) is ``top`` or below it. O(depth)."""
        node = self._nodes.get(role)
        return top in (node.lineage if node is not None else lineage(role))

    def roles(self) -> list[str]:
        """The roles that have frameworks of their own, sorted."""
        return sorted(path for path, node in self._nodes.items() if node.frameworks)

    # ----------------------------------------------------------- consumption
    @property
    def tracking(self) -> bool:
        return self._tracking

    def start_tracking(self, holdings: Iterable[tuple[str, Mapping[str, int]]]) -> None:
        """Track consumption from now on, starting from ``holdings``: (role,
        scalar thousandths held) for what every framework holds. O(holdings · depth)."""
        for node in self._nodes.values():
            node.consumed = {}
        self._tracking = True
        for role, millis in holdings:
            self.charge(role, millis, 1)

    def stop_tracking(self) -> None:
        self._tracking = False
        for node in self._nodes.values():
            node.consumed = {}

    def charge(self, role: str, millis: Mapping[str, int], sign: int) -> None:
        """``millis`` were allocated to (+1) or came back from (-1) a framework
        of ``role``: the role and every ancestor consume that much more or less.
        A no-op while not tracking."""
        if not self._tracking:
            return
        node: _RoleNode | None = self._nodes[role]
        while node is not None:
            add_millis(node.consumed, millis, sign)
            node = node.parent

    def consumed(self, role: str) -> Mapping[str, int]:
        """What ``role`` and its descendants hold (empty without frameworks
        there, or while not tracking). Read-only. O(1)."""
        node = self._nodes.get(role)
        return node.consumed if node is not None else {}

    # ---------------------------------------------------------------- checks
    def _check(self, holdings: Iterable[tuple[str, Mapping[str, int]]] = ()) -> None:
        """Raise ``AssertionError`` unless the tree is consistent: parents and
        child counts agree, every node's subtree has a framework, and (while
        tracking) each node's consumption is the sum of ``holdings`` below it."""
        children: dict[str, int] = {path: 0 for path in self._nodes}
        below: dict[str, int] = {path: 0 for path in self._nodes}
        for path, node in self._nodes.items():
            assert node.lineage == lineage(path), f"role {path}: lineage {node.lineage}"
            assert node.frameworks >= 0 and node.children >= 0, f"role {path}: negative counts"
            if node.parent is not None:
                assert self._nodes.get(node.parent.path) is node.parent, f"role {path}: stale parent"
                assert node.parent.path == path.rpartition("/")[0], f"role {path}: wrong parent"
                children[node.parent.path] += 1
            else:
                assert "/" not in path, f"role {path}: no parent"
            for ancestor in node.lineage:
                below[ancestor] += node.frameworks
        for path, node in self._nodes.items():
            assert node.children == children[path], f"role {path}: {node.children} children, found {children[path]}"
            assert below[path] > 0, f"role {path}: no framework in its subtree"
        if self._tracking:
            expected: dict[str, Millis] = {path: {} for path in self._nodes}
            for role, millis in holdings:
                for ancestor in lineage(role):
                    add_millis(expected[ancestor], millis)
            for path, node in self._nodes.items():
                assert node.consumed == expected[path], f"role {path}: consumed {node.consumed} != {expected[path]}"
