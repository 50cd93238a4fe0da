"""How often a long-running runtime's collector passes over its young objects.

Python passes over its young generation every 700 container allocations
(net). A loop that handles thousands of messages a second — the master's,
an agent's — then passes over every turn's survivors (task records, updates
waiting for their acknowledgement, launches in flight), which live a second
or two, and promotes them to be passed over again. At 50,000 most have died
of their reference counts first: the master's collector went from 7 % to 2 %
of its CPU in ``bench/throughput.py``'s control plane, and a pass is still a
few milliseconds.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_PASS_EVERY", "pass_over_young_objects_less_often"]

#: container objects allocated (net) between two passes over the young generation
YOUNG_PASS_EVERY = 50_000


def pass_over_young_objects_less_often(every: int = YOUNG_PASS_EVERY) -> None:
    """Set the young generation's threshold for this process to ``every``
    (not lower than it is already; 0, the collector off, stays off)."""
    young, *older = gc.get_threshold()
    if 0 < young < every:
        gc.set_threshold(every, *older)
