"""The Fuxi service assembled: job server, page, store, scheduler core,
service, driver and, with ZooKeeper, the candidacy. ``mesoslike fuxi
serve`` runs a :class:`FuxiRunner` (docs/fuxi.rst, "Running the service").

Standalone, it leads at once: the jobs kept in ``<work-dir>/state/`` (a
:class:`~.state_store.FileRecordStore`) come back. With ``zk`` it is one
candidate among several services (:class:`~mesoslike_frameworks.candidacy.Candidacy`,
the master's own leadership table): the job server answers as a standby
until it is elected, holds requests while it loads the jobs kept in
ZooKeeper, and while its leadership is in doubt; a lost leadership ends
it (:attr:`FuxiRunner.lost`), and the next leader takes the jobs over.
"""

from __future__ import annotations

import logging
import socket
import uuid
from pathlib import Path
from typing import Any, Callable

from mesoslike import ConfigError, DriverStatus, FrameworkInfo, MesoslikeError, Resources, SchedulerDriver
from mesoslike.credentials import load_credentials, load_keys
from mesoslike_frameworks.candidacy import Candidacy, Lifetime
from mesoslike_frameworks.fuxi import DEFAULT_FAILOVER_TIMEOUT, hard_state
from mesoslike_frameworks.fuxi.core import FuxiCore
from mesoslike_frameworks.fuxi.hard_state import HardState
from mesoslike_frameworks.fuxi.page import fuxi_page
from mesoslike_frameworks.fuxi.protocol import STANDBY_REFUSAL
from mesoslike_frameworks.fuxi.quota import QuotaConfig
from mesoslike_frameworks.fuxi.service import FuxiService, JobServer
from mesoslike_frameworks.fuxi.state_store import FileRecordStore, RecordStore

__all__ = ["FuxiRunner", "DEFAULT_FAILOVER_TIMEOUT", "ZK_NEEDS_WORK_DIR"]

log = logging.getLogger("mesoslike_frameworks.fuxi.runner")

ZK_NEEDS_WORK_DIR = "--zk needs --work-dir: the jobs' AppMaster snapshots and logs go there (shared by the services)"


class FuxiRunner(Lifetime):
    """One ``fuxi serve`` process's parts. Made (job server and page bound,
    the options checked: :class:`~mesoslike.ConfigError` says what is
    wrong), then :meth:`start`\\ ed, then :meth:`stop`\\ ped. ``quota``: the
    quota file's configuration (None: the kept one, else one ``default``
    group). ``key``/``master_key``: the framework's identity at the master;
    with ``credentials`` (a file) job clients authenticate and ``key`` is
    the job server's key too. ``say``: where it tells a person what it
    does (the CLI prints)."""

    def __init__(self, master: str, *, zk: str | None = None, ip: str = "127.0.0.1", port: int = 5060,
                 http_port: int | None = None, quota: QuotaConfig | None = None, name: str = "fuxi",
                 role: str = "*", work_dir: str | None = None, failover_timeout: float | None = None,
                 keep_ended: int = 1000, zk_session_timeout: float = 10.0, credentials: str | None = None,
                 insecure: bool = False, key: str | None = None, master_key: str | None = None,
                 say: Callable[[str], None] = log.info) -> None:
        if zk and not work_dir:
            raise ConfigError(ZK_NEEDS_WORK_DIR)
        self.master, self.zk, self.ip = master, zk, ip
        self.name, self.role, self.work_dir = name, role, work_dir
        self.quota, self.keep_ended = quota, keep_ended
        self.key, self.master_key = key, master_key
        self.zk_session_timeout = zk_session_timeout
        self.say = say
        self.kept = bool(zk or work_dir)
        self.failover_timeout = failover_timeout if failover_timeout is not None else \
            DEFAULT_FAILOVER_TIMEOUT if self.kept else 0.0
        self.keys = load_keys(key) if credentials else None
        self.credentials = load_credentials(credentials) if credentials else None
        self.server = JobServer(None, f"tcp://{ip}:{port}", refusing=STANDBY_REFUSAL, keys=self.keys,
                                credentials=self.credentials, insecure=insecure, work_dir=work_dir)
        try:
            self.page = fuxi_page(ip, http_port, self._status, lambda: self.server.refusing) \
                if http_port is not None else None
        except MesoslikeError:
            self.server.stop()
            raise
        super().__init__()
        self.store: RecordStore | None = None
        self.service: FuxiService | None = None
        self.candidacy: Candidacy | None = None
        self._state: HardState | None = None

    @property
    def address(self) -> str:
        """Where job clients reach it."""
        return self.server.address

    def _status(self) -> dict[str, Any] | None:
        service = self.server.service   # None until this service leads
        return service.status() if service is not None else None

    # ------------------------------------------------------------ serving
    def start(self) -> None:
        """Serve: lead at once (standalone), or stand for election (``zk``)."""
        if self.page is not None:
            self.page.start()
            self.say(f"fuxi scheduler's page on {self.page.address}/")
        if not self.zk:
            records: dict[str, bytes] = {}
            if self.work_dir:
                store = FileRecordStore(Path(self.work_dir) / "state")
                records = store.load()
            else:
                store = None
            self._serve(self._build(records, store))
            self.server.start()
            self._start_driver()
            return
        info = {"address": self.server.address, "name": self.name, "id": str(uuid.uuid4()),
                "hostname": socket.gethostname()}
        self.candidacy = Candidacy(self.zk, info, self._candidate, self._lead, self.drop,
                                   session_timeout=self.zk_session_timeout, name="Fuxi scheduler",
                                   # a request held since the election is answered once the jobs are back
                                   on_elected=self.server.hold,
                                   on_standby=lambda: self.server.stand_by(hold=False))
        self.server.start()
        self.candidacy.start()
        self.say(f"fuxi scheduler {self.name!r} standing by on {self.server.address}: one of the services in "
                 f"{self.zk}")

    def _candidate(self, records: dict[str, bytes], store: RecordStore) -> _Leader:
        return _Leader(self._build(records, store), self.server)

    def _build(self, records: dict[str, bytes], store: RecordStore | None) -> FuxiService:
        """A service from the kept records (not acting yet): the quota from
        the quota file, else the kept one, else the default."""
        try:
            state = hard_state.decode(records)
        except MesoslikeError as exc:
            raise ConfigError(f"cannot read the scheduler's kept state: {exc}") from None
        kept = state.service
        config = self.quota
        if config is None and kept is not None:
            config = QuotaConfig({group: Resources.parse(maximum) if maximum else None
                                  for group, maximum in kept.quota.items()},
                                 frozenset(kept.global_blacklist), kept.preemption, kept.policies,
                                 kept.blacklist_reports, kept.blacklist_report_seconds)
        core = FuxiCore.from_config(config or QuotaConfig())
        service = FuxiService(core, work_dir=self.work_dir, appmaster_ip=self.ip, store=store,
                              appmaster_service=self.zk or "", master=self.master, keep_ended=self.keep_ended,
                              credentials=self.credentials,
                              service_key=self.keys.public if self.keys is not None else None,
                              orphan_timeout=self.failover_timeout if store is not None and self.failover_timeout > 0
                              else None)
        service.records = dict(records)
        service.service_address = self.server.address   # for the AppMasters it adopts or starts
        if self.candidacy is not None:
            service.on_stored, service.on_fenced = self.candidacy.stored, self.candidacy.fenced
        self.store, self._state = store, state
        return service

    def _serve(self, service: FuxiService) -> None:
        """Lead with ``service``: its driver made (the kept framework id: the
        master hands this framework's tasks over to it), the kept jobs back,
        the job server answering for it."""
        state = self._state
        framework_id = state.service.framework_id if state is not None and state.service is not None else ""
        webui_url = f"{self.page.address}/" if self.page is not None else ""
        self.driver = SchedulerDriver(service, FrameworkInfo(name=self.name, role=self.role,
                                                             failover_timeout=self.failover_timeout,
                                                             id=framework_id, webui_url=webui_url),
                                      self.master, key=self.key, master_key=self.master_key)
        service.attach(self.driver)
        if state is not None:
            service.recover(state)
        self.service = service
        self.server.serve(service)   # (after the jobs are back: a request held since the election asks of them)
        groups = ", ".join(f"{g.name} ({g.maximum or 'no maximum'})"
                           for g in sorted(service.core.scheduler.groups.values(), key=lambda g: g.name))
        self.say(f"fuxi scheduler {self.name!r} serving jobs on {self.server.address}, framework in role "
                 f"{self.role} on {self.master}; quota groups: {groups}; "
                 f"{'job clients authenticated' if self.server.secured else 'job clients NOT authenticated'}")

    def _start_driver(self) -> None:
        assert self.driver is not None
        self.driver.start()

    def _lead(self, leader: _Leader) -> None:
        """Elected, the jobs loaded: serve (the candidacy's thread)."""
        self.say(f"elected the leading Fuxi scheduler in {self.zk}")
        self._serve(leader.service)
        self._start_driver()

    def ended(self) -> str:
        """Why the driver ended on its own ("" while it runs)."""
        driver = self.driver
        if driver is None or driver.status in (DriverStatus.RUNNING, DriverStatus.NOT_STARTED):
            return ""
        errors = "; ".join(self.service.errors) if self.service is not None else ""
        return f"the scheduler driver ended ({driver.status.value}): {errors or 'no error reported'}"

    def stop(self) -> None:
        """Stop. With the jobs kept (and a failover timeout), the workers and
        AppMasters keep running for the next service (this one restarted, or
        the next leader) to take over; otherwise the framework ends: its
        tasks are killed, its AppMasters stopped."""
        hand_over = self.kept and self.failover_timeout > 0
        if self.page is not None:
            self.page.stop()
        self.server.stop()
        if self.service is not None:
            self.service.stop(failover=hand_over)
        if self.driver is not None:
            self.driver.stop(failover=hand_over)
            self.driver.join(10)
        if self.candidacy is not None:
            self.candidacy.stop()
        elif isinstance(self.store, FileRecordStore):
            self.store.close()


class _Leader:
    """The service as its candidacy leads with it: while leadership is in
    doubt the job server holds its requests too (answered if it goes on)."""

    def __init__(self, service: FuxiService, server: JobServer) -> None:
        self.service = service
        self.server = server

    @property
    def records(self) -> dict[str, bytes]:
        return self.service.records

    @records.setter
    def records(self, records: dict[str, bytes]) -> None:
        self.service.records = records

    @property
    def writes(self) -> int:
        return self.service.writes

    @writes.setter
    def writes(self, writes: int) -> None:
        self.service.writes = writes

    def pause(self) -> None:
        self.service.pause()
        self.server.stand_by(hold=True)

    def resume(self) -> None:
        self.service.resume()
        self.server.serve(self.service)
