"""``--advertise-ip``: a master or agent bound to 0.0.0.0 never advertises
0.0.0.0 — not in ZooKeeper, not in ``/state`` — but this host's address or
the one given (flag, ``MESOSLIKE_*_ADVERTISE_IP``, config file key). Real
processes and a real ZooKeeper."""

import json
import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from e2e_helpers import REPO, child_env, cluster  # noqa: F401  (fixture)
from mesoslike.advertise import advertised_ip, host_address
from mesoslike.errors import ConfigError
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)


def members(url_hosts: str, path: str) -> list[dict]:
    client = KazooClient(hosts=url_hosts)
    client.start(timeout=10)
    try:
        return [json.loads(client.get(f"{path}/{name}")[0]) for name in sorted(client.get_children(path))
                if name.startswith("json.info_")]
    finally:
        client.stop()
        client.close()


def test_a_master_bound_to_every_interface_advertises_this_hosts_address(cluster, zookeeper):  # noqa: F811
    host = host_address()
    assert host != "0.0.0.0"
    url = zookeeper.url("/advertised")
    cluster.start_master("--ip", "0.0.0.0", "--zk", url)
    cluster.start_agent("a1", "cpus:1;mem:256")
    state = cluster.state()
    assert state["leader"]["address"] == f"tcp://{host}:{cluster.port}"
    assert state["leader"]["http_address"] == f"http://{host}:{cluster.http_port}"
    hosts, path = url[len("zk://"):].split("/", 1)
    (member,) = members(hosts, "/" + path)
    # Mesos's MasterInfo (its address: the HTTP API's), ours beside it
    assert member["mesoslike_address"] == f"tcp://{host}:{cluster.port}" and "0.0.0.0" not in json.dumps(member)
    assert member["address"] == {"hostname": host, "ip": host, "port": cluster.http_port}
    assert f"bound to tcp://0.0.0.0:{cluster.port}" in cluster.master.output()


def test_advertise_ip_is_what_peers_are_told_for_master_and_agent(cluster, tmp_path):  # noqa: F811
    cluster.start_master("--ip", "0.0.0.0", "--advertise-ip", "127.0.0.1")
    assert cluster.state()["leader"]["address"] == f"tcp://127.0.0.1:{cluster.port}"
    config = tmp_path / "agent.toml"
    config.write_text('[agent]\nadvertise-ip = "127.0.0.1"\n')
    # without --credentials an agent binds a non-loopback address only with --insecure
    cluster.agents["a1"] = cluster._start("agent-a1", [
        "agent", "--master", cluster.address, "--resources", "cpus:1;mem:256", "--hostname", "a1",
        "--work-dir", str(cluster.work_root / "a1"), "--key", cluster.keys.secret("agent1"),
        "--master-key", cluster.master_key, "--ip", "0.0.0.0", "--insecure", "--config", str(config)])
    cluster.start_agent("a2", "cpus:1;mem:256")  # the defaults: --ip 127.0.0.1, advertised as bound
    agents = cluster.wait_for_agents(["a1", "a2"])
    addresses = {agent["hostname"]: agent["http_address"] for agent in cluster.state()["agents"]}
    assert addresses["a1"].startswith("http://127.0.0.1:") and addresses["a2"].startswith("http://127.0.0.1:")
    assert "0.0.0.0" not in json.dumps(cluster.state()) and agents


def test_the_flag_env_var_and_bad_values():
    for command in ("master", "agent"):
        shown = subprocess.run([sys.executable, "-m", "mesoslike", command, "--help"], cwd=str(REPO), env=child_env(),
                               capture_output=True, text=True, timeout=60).stdout
        assert "--advertise-ip" in shown and f"MESOSLIKE_{command.upper()}_ADVERTISE_IP" in shown
    bad = subprocess.run([sys.executable, "-m", "mesoslike", "master", "--port", "0", "--http-port", "0",
                          "--advertise-ip", "0.0.0.0"], cwd=str(REPO), env=child_env(), capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "no address a peer can reach" in bad.stderr
    assert advertised_ip("10.1.2.3") == "10.1.2.3" and advertised_ip("0.0.0.0", "10.9.9.9") == "10.9.9.9"
    assert advertised_ip("::") == host_address()
    with pytest.raises(ConfigError, match="must be an IP address"):
        advertised_ip("0.0.0.0", "not-an-ip")
