"""The service scheduler assembled: store, core, REST API, HTTP server,
driver and, with ZooKeeper, the candidacy. ``mesoslike services serve``
and ``mesoslike local --services`` run a :class:`ServicesRunner`."""

from __future__ import annotations

import logging
import socket
import uuid
from pathlib import Path
from typing import Any

from mesoslike import ConfigError, DriverStatus, MesoslikeError, SchedulerDriver
from mesoslike_frameworks.candidacy import Candidacy, Lifetime
from mesoslike_frameworks.services.httpd import ServicesHTTPServer
from mesoslike_frameworks.services.service import (FileStore, ServicesScheduler, ServicesService, framework_info,
                                                   new_core)

__all__ = ["ServicesRunner", "DEFAULT_FAILOVER_TIMEOUT", "DEFAULT_HTTP_PORT"]

log = logging.getLogger("mesoslike_frameworks.services.runner")

#: how long the master keeps the instances running while no service leads, when the state is kept
DEFAULT_FAILOVER_TIMEOUT = 600.0
DEFAULT_HTTP_PORT = 8080
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


class ServicesRunner(Lifetime):
    """One service scheduler process's parts (docs/services.rst, "Running it").
    ``credentials`` (:class:`mesoslike.credentials.Credentials`): API clients
    need an operator token and the ``manage_apps`` ACL decides which apps
    each sees; without, the API serves anyone, on loopback only unless
    ``insecure``. ``key``/``master_key``: the framework's identity at the
    master."""

    def __init__(self, master: str, *, zk: str | None = None, ip: str = "127.0.0.1", http_port: int = 0,
                 work_dir: str | None = None, name: str = "services", role: str = "*",
                 failover_timeout: float | None = None, credentials: Any = None, key: str | None = None,
                 master_key: str | None = None, insecure: bool = False, zk_session_timeout: float = 10.0,
                 drain_poll: float = 2.0, user: str = "") -> None:
        if zk and not work_dir:
            raise ConfigError("--zk needs --work-dir (each service's own scratch: the state itself is kept in "
                              "ZooKeeper)")
        if credentials is None and not insecure and ip not in _LOOPBACK:
            raise ConfigError(f"serving the API on {ip} without --credentials lets anyone who reaches it run "
                              "commands: give --credentials, serve on 127.0.0.1, or pass --insecure")
        self.master = master
        self.zk = zk
        self.name, self.role, self.user = name, role, user
        self.kept = bool(zk or work_dir)
        self.failover_timeout = failover_timeout if failover_timeout is not None else \
            (DEFAULT_FAILOVER_TIMEOUT if self.kept else 0.0)
        self.key, self.master_key = key, master_key
        self.credentials = credentials
        self.zk_session_timeout = zk_session_timeout
        self.store: Any = None
        records: dict[str, bytes] = {}
        if work_dir and not zk:
            self.store = FileStore(Path(work_dir) / "state")
            records = self.store.load()
        core = new_core(role)
        try:
            core.recover(records)
        except ValueError as exc:
            raise ConfigError(f"cannot read the services' kept state in {work_dir}: {exc}") from None
        self.service = ServicesService(core, self.store, name=name, master=master, zk=zk or "",
                                       drain_poll=drain_poll, failover_timeout=self.failover_timeout)
        self.service.records = dict(records)
        self.http = ServicesHTTPServer(ip, http_port, self.service.api(credentials).handle)
        self.service.http_address = self.http.address
        super().__init__()
        self.candidacy: Candidacy | None = None

    @property
    def address(self) -> str:
        return self.http.address

    def start(self) -> None:
        """Serve the API; lead at once (standalone) or stand for election (``zk``)."""
        if not self.zk:
            self.http.start()
            self._serve(self.service)
            return
        info = {"address": self.http.address, "http_address": self.http.address, "name": self.name,
                "id": str(uuid.uuid4()), "hostname": socket.gethostname()}
        self.candidacy = Candidacy(self.zk, info, self._build, self._serve, self.drop,
                                   session_timeout=self.zk_session_timeout)
        self.service._on_stored = self.candidacy.stored
        self.service._on_fenced = self.candidacy.fenced
        self.service.leader_lookup = self.candidacy.leader_address
        self.http.start()
        self.candidacy.start()

    def _build(self, records: dict[str, bytes], store: Any) -> ServicesService:
        core = new_core(self.role)
        core.recover(records)
        with self.service.lock:
            self.service.core = core
            self.service.store = store
        return self.service

    def _serve(self, service: ServicesService) -> None:
        self.driver = SchedulerDriver(ServicesScheduler(service),
                                      framework_info(self.name, self.role, self.failover_timeout,
                                                     service.core.framework_id, self.user, self.http.address + "/"),
                                      self.master, key=self.key, master_key=self.master_key)
        service.start(self.driver)
        log.info("services %r serving on %s, framework %r in role %s on %s", self.name, self.http.address,
                 service.core.framework_id or "(new)", self.role, self.master)

    def stop(self) -> None:
        """Stop; the instances keep running for ``failover_timeout`` when the
        state is kept (the next service takes them over), else the framework
        ends and they are killed."""
        hand_over = self.kept and self.failover_timeout > 0
        self.service.stop()
        if self.driver is not None:
            self.driver.stop(failover=hand_over)
            self.driver.join(10)
        if self.candidacy is not None:
            self.candidacy.stop()
        self.http.stop()
        if self.store is not None and hasattr(self.store, "close"):
            self.store.close()


def check_started(runner: ServicesRunner) -> None:
    """Raise MesoslikeError if the driver ended (for callers polling)."""
    if runner.driver is not None and runner.driver.status not in (DriverStatus.RUNNING, DriverStatus.NOT_STARTED):
        raise MesoslikeError(f"the scheduler driver ended ({runner.driver.status.value}): "
                             f"{'; '.join(runner.service.errors) or 'no error reported'}")
