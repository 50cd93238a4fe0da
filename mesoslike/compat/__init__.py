"""Compatibility layers: run code written for another Mesos client library on
mesoslike by changing its imports.

- :mod:`mesoslike.compat.pymesos` — pymesos's ``MesosSchedulerDriver``,
  ``Scheduler``, ``MesosExecutorDriver``, ``Executor``, ``encode_data`` and
  ``decode_data`` (``docs/framework-api.rst``, "pymesos compatibility").

They are built on the public framework API only (``tests/test_layering.py``).
"""
