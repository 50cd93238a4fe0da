"""A task with a health check and a fetched URI (issue 18 §2, §3).

The example serves a small web app as ``app.tar.gz`` from an HTTP server of
its own (127.0.0.1), then launches two tasks:

- ``web``: fetches the archive (``uris``; extracted into the sandbox, kept in
  the agent's fetcher cache) and runs the app in it; an ``HTTP`` health check
  GETs its ``/health`` — the example waits for the ``TASK_RUNNING`` update
  with ``healthy=True``, then kills the task;
- ``sick``: the same app, whose ``COMMAND`` check (``test -f ready``) never
  passes: after 2 failures it is killed, ``TASK_FAILED`` with reason
  ``REASON_TASK_HEALTH_CHECK_STATUS_UPDATED``.

Run it on a local cluster::

    mesoslike local -- python examples/health_and_fetch.py

It exits 0 when both tasks behaved so.
"""

from __future__ import annotations

import argparse
import http.server
import io
import os
import socket
import sys
import tarfile
import threading

from mesoslike import (
    CommandURI,
    FrameworkInfo,
    HealthCheck,
    HTTPCheck,
    Resources,
    Scheduler,
    SchedulerDriver,
    TaskInfo,
    TaskState,
)

TASK_RESOURCES = Resources.parse("cpus:0.25;mem:64")
APP = b"""\
import http.server, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b"ok\\n")

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def app_archive() -> bytes:
    """``app.tar.gz`` holding ``app/serve.py``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("app/serve.py")
        info.size = len(APP)
        archive.addfile(info, io.BytesIO(APP))
    return buffer.getvalue()


def serve(content: bytes) -> tuple[http.server.ThreadingHTTPServer, str]:
    """An HTTP server on 127.0.0.1 serving ``content`` at /app.tar.gz; its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path != "/app.tar.gz":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/app.tar.gz"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class HealthScheduler(Scheduler):
    def __init__(self, url: str) -> None:
        self.url = url
        self.launched = False
        self.outcome: dict[str, str] = {}
        self.done = threading.Event()
        self.lock = threading.Lock()

    def tasks(self, agent_id: str) -> list[TaskInfo]:
        fetch = [CommandURI(self.url, cache=True)]     # extracted into the sandbox (extract defaults to true)
        port = free_port()
        web = TaskInfo("web", agent_id, f"exec {sys.executable} app/serve.py {port}", TASK_RESOURCES, uris=fetch,
                       health_check=HealthCheck("HTTP", http=HTTPCheck(port, "/health"), delay_seconds=0.5,
                                                interval_seconds=1, timeout_seconds=5, grace_period_seconds=30))
        sick = TaskInfo("sick", agent_id, f"exec {sys.executable} app/serve.py {free_port()}", TASK_RESOURCES,
                        uris=fetch, health_check=HealthCheck("COMMAND", command="test -f ready", delay_seconds=0.5,
                                                             interval_seconds=0.5, consecutive_failures=2,
                                                             grace_period_seconds=0))
        return [web, sick]

    def resource_offers(self, driver, offers) -> None:
        with self.lock:
            for offer in offers:
                if self.launched or not offer.resources.contains(TASK_RESOURCES + TASK_RESOURCES):
                    driver.decline_offer(offer.id)
                    continue
                self.launched = True
                driver.launch_tasks([offer.id], self.tasks(offer.agent_id))

    def status_update(self, driver, status) -> None:
        health = "" if status.healthy is None else f"healthy={status.healthy}"
        print(" ".join(part for part in (f"{status.task_id}:", status.state, health, status.reason, status.message)
                       if part))
        with self.lock:
            if status.task_id == "web" and status.healthy and status.state == TaskState.RUNNING:
                self.outcome["web"] = "healthy"
                driver.kill_task("web")
            if status.task_id == "sick" and status.terminal:
                self.outcome["sick"] = f"{status.state} {status.reason}"
            if status.task_id == "web" and status.terminal and "web" not in self.outcome:
                self.outcome["web"] = f"{status.state} before it was healthy: {status.message}"
            if len(self.outcome) == 2:
                self.done.set()

    def error(self, driver, message) -> None:
        print(f"error: {message}", file=sys.stderr)
        self.done.set()


def main() -> int:
    parser = argparse.ArgumentParser(description="A task with a health check and a fetched URI.")
    parser.add_argument("--master", default=os.environ.get("MESOSLIKE_MASTER", "tcp://127.0.0.1:5050"),
                        help="master address (default: $MESOSLIKE_MASTER or tcp://127.0.0.1:5050)")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    server, url = serve(app_archive())
    scheduler = HealthScheduler(url)
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="health-and-fetch"), args.master)
    driver.start()
    try:
        if not scheduler.done.wait(args.timeout):
            print(f"gave up after {args.timeout:g} s", file=sys.stderr)
            return 1
    finally:
        driver.stop()
        driver.join(10)
        server.shutdown()
    expected = {"web": "healthy", "sick": "TASK_FAILED REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"}
    print(f"outcome: {scheduler.outcome}")
    return 0 if scheduler.outcome == expected else 1


if __name__ == "__main__":
    sys.exit(main())
