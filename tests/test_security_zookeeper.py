"""Issue 13 §7 with a real ZooKeeper: a master with ``--zk-auth`` writes the
election and registry znodes under a digest ACL; a peer without the
credentials (an agent, a framework, an attacker) reads them and can change
nothing."""

from __future__ import annotations

import itertools
import logging
import os

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl

from mesoslike.errors import ConfigError
from mesoslike.ha import LeaderDetector, ZkUrl
from mesoslike.ha.zookeeper import ZooKeeperError
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)

_paths = itertools.count()


def auth_file(tmp_path, text="masters:s3cret", mode=0o600):
    path = tmp_path / "zk-auth"
    path.write_text(text + "\n")
    os.chmod(path, mode)
    return str(path)


def test_only_masters_change_the_znodes_others_read(zookeeper, tmp_path):  # noqa: F811
    url = ZkUrl.parse(zookeeper.url(f"/secured-{next(_paths)}")).with_auth_file(auth_file(tmp_path))
    master = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    master.start()
    outsider = KazooClient(hosts=url.hosts)
    outsider.start(timeout=10)
    try:
        wait_until(lambda: master.is_leader, 30, "the master to lead")
        wait_until(lambda: master.leadership.leading is not None and master.leadership.leading.persisted
                   is not None, 30, "the registry to be written")
        members = outsider.get_children(url.path)                       # agents and frameworks read
        assert members
        detector = LeaderDetector(ZkUrl.parse(str(url)))                 # an agent's view, no credentials
        detector.start()
        try:
            wait_until(lambda: (detector.leader() or {}).get("address") == master.address, 15, "the leader seen")
        finally:
            detector.stop()
        for attempt in (lambda: outsider.create(f"{url.path}/member_0000000000", b'{"address": "tcp://evil:1"}',
                                                sequence=False),
                        lambda: outsider.set(f"{url.path}/{members[0]}", b"{}"),
                        lambda: outsider.delete(f"{url.path}/{members[0]}"),
                        lambda: outsider.set_acls(url.path, [make_acl("world", "anyone", all=True)])):
            with pytest.raises(NoAuthError):
                attempt()
        registry = [child for child in outsider.get_children(url.path) if not child.startswith("member_")]
        for child in registry:                                          # the registry znodes too
            with pytest.raises(NoAuthError):
                outsider.set(f"{url.path}/{child}", b"forged")
        assert master.is_leader
    finally:
        outsider.stop()
        outsider.close()
        master.stop()


def test_a_bad_auth_file_is_refused(tmp_path):
    url = ZkUrl.parse("zk://127.0.0.1:1/x")
    with pytest.raises(ConfigError, match="must be 0600"):
        url.with_auth_file(auth_file(tmp_path, mode=0o644))
    with pytest.raises(ConfigError, match="USER:PASSWORD"):
        url.with_auth_file(auth_file(tmp_path, text="nopassword"))
    assert "s3cret" not in repr(url.with_auth_file(auth_file(tmp_path)))


# ------------------------------------------------------------------ squatting
def outsider_client(url):
    client = KazooClient(hosts=url.hosts)
    client.start(timeout=10)
    return client


def test_a_secured_master_creates_an_absent_group_path_with_its_acl_so_nobody_can_squat(zookeeper, tmp_path):  # noqa: F811
    url = ZkUrl.parse(zookeeper.url(f"/fresh-{next(_paths)}/group")).with_auth_file(auth_file(tmp_path))
    master = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    master.start()
    outsider = outsider_client(url)
    try:
        wait_until(lambda: master.is_leader, 30, "the master to lead")
        acl, _ = outsider.get_acls(url.path)
        assert {(entry.id.scheme, entry.perms) for entry in acl} == {("digest", 31), ("world", 1)}
        with pytest.raises(NoAuthError):   # the squatter's move, once the path exists
            outsider.create(f"{url.path}/json.info_", b'{"address": "tcp://evil:1"}', ephemeral=True, sequence=True)
    finally:
        outsider.stop()
        outsider.close()
        master.stop()


def squat(url, guarded_by=None):
    """An anonymous client (or one with ``guarded_by``'s digest) makes the group
    path open and holds an ephemeral member in it, as the issue's squatter did."""
    client = KazooClient(hosts=url.hosts, auth_data=[("digest", ":".join(guarded_by))] if guarded_by else None)
    client.start(timeout=10)
    if guarded_by:
        from mesoslike.ha.zookeeper import master_acl
        client.ensure_path(url.path, acl=master_acl(guarded_by))
    else:
        client.ensure_path(url.path)
    client.create(f"{url.path}/json.info_", b'{"address": "tcp://evil:6666", "id": "evil"}', ephemeral=True,
                  sequence=True, acl=[make_acl("world", "anyone", all=True)])
    return client


@pytest.mark.parametrize("where", ["path", "member"])
def test_a_secured_master_refuses_to_start_in_a_group_it_cannot_vouch_for(zookeeper, tmp_path, where):  # noqa: F811
    url = ZkUrl.parse(zookeeper.url(f"/squatted-{next(_paths)}")).with_auth_file(auth_file(tmp_path))
    # "path": made open by an anonymous client; "member": the path is the masters' but holds a foreign member
    squatter = squat(url, guarded_by=url.auth if where == "member" else None)
    try:
        with pytest.raises(ZooKeeperError) as refused:
            MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
        text = str(refused.value)
        assert url.path in text and "not the masters'" in text and "deleteall" in text
        assert ("json.info_" in text) == (where == "member")
        assert "world:anyone:" in text
    finally:
        squatter.stop()
        squatter.close()


def test_without_zk_auth_a_member_that_outranks_the_master_is_logged_as_unverified(zookeeper, caplog):  # noqa: F811
    url = ZkUrl.parse(zookeeper.url(f"/open-{next(_paths)}"))
    squatter = squat(url)
    master = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    try:
        with caplog.at_level(logging.WARNING, "mesoslike.ha"):
            master.start()
            wait_until(lambda: any("cannot be verified" in r.getMessage() for r in caplog.records), 20,
                       "the warning")
        (line,) = [r for r in caplog.records if "cannot be verified" in r.getMessage()]
        assert line.levelno == logging.WARNING and "tcp://evil:6666" in line.getMessage()
        assert not master.is_leader
    finally:
        master.stop()
        squatter.stop()
        squatter.close()
