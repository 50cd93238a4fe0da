"""A framework's read-only web page, public for frameworks that serve one
(docs/framework-api.rst, "A page of its own"; the Fuxi service's
``--http-port``, docs/dashboard.rst).

:class:`StatusPage` serves, on the one HTTP edge the master uses
(:mod:`mesoslike.http_server`): the framework's own files (``index.html``
at ``/``, the others at ``/static/NAME``) together with the master
dashboard's script helpers, style and icon (``/static/page.js``,
``/static/dashboard.css``, ``/static/favicon.svg``) so that its page looks
and works like the master's; its JSON views (path -> a function returning
a JSON-able document); and ``/metrics``, the Prometheus text of the
:class:`~mesoslike.observations.Metric` values a function returns
(:func:`metric` makes one). Every file and view is public: a page shows
what a framework would show anyone it serves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, Mapping

from mesoslike.master.http import StatusHTTPServer, dashboard_files
from mesoslike.metrics import CONTENT_TYPE, exposition, metrics_registry
from mesoslike.observations import Metric, metric

__all__ = ["StatusPage", "Metric", "metric", "SHARED_FILES"]

#: the master dashboard's files a framework's page shares
SHARED_FILES = ("/static/page.js", "/static/dashboard.css", "/static/favicon.svg")


def _as_json(view: Callable[[], object]) -> Callable[[], tuple[str, bytes]]:
    return lambda: ("application/json", json.dumps(view()).encode())


class StatusPage:
    """The page, bound on ``ip:port`` (0: any free port) when made —
    :class:`~mesoslike.ConfigError` if it cannot be — and served once
    :meth:`start` is called. ``static``: the directory of the framework's
    files; ``views``: path -> document (served as JSON); ``metrics``: the
    values of ``/metrics`` (named ``<prefix><name>``)."""

    def __init__(self, ip: str, port: int, static: Path, views: Mapping[str, Callable[[], object]],
                 metrics: Callable[[], Iterable[Metric]] | None = None, *, prefix: str = "mesoslike_",
                 workers: int = 2, max_connections: int = 16) -> None:
        shared = dashboard_files()
        files = {path: shared[path] for path in SHARED_FILES if path in shared}
        files.update(dashboard_files(static))
        routes = {path: _as_json(view) for path, view in views.items()}
        if metrics is not None:
            registry = metrics_registry(metrics, prefix)
            routes["/metrics"] = lambda: (CONTENT_TYPE, exposition(registry))
        self._server = StatusHTTPServer(ip, port, routes, dashboard=files, workers=workers,
                                        max_connections=max_connections)

    @property
    def address(self) -> str:
        """``http://HOST:PORT`` (the port bound)."""
        return self._server.address

    def start(self) -> StatusPage:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
