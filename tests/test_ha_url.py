"""zk:// and tcp:// master addresses (mesoslike.ha.url): pure parsing, clear errors."""

import sys

import pytest

from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.ha import ZkUrl, is_zk_url, parse_master_address

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("text, hosts, path", [
    ("zk://127.0.0.1:2181/mesoslike", "127.0.0.1:2181", "/mesoslike"),
    ("zk://h1:2181,h2:2182,h3:2183/mesos/cluster-a", "h1:2181,h2:2182,h3:2183", "/mesos/cluster-a"),
    ("zk://zk-1.example.com:65535/a_b.c", "zk-1.example.com:65535", "/a_b.c"),
    ("zk://[::1]:2181/m", "[::1]:2181", "/m"),
    ("  zk://localhost:1/m\n", "localhost:1", "/m"),
    ("ZK://localhost:2181/m", "localhost:2181", "/m"),
    ("zk://h:2181/zookeeper-not-reserved", "h:2181", "/zookeeper-not-reserved"),
    ("zk://h:2181/a/zookeeper", "h:2181", "/a/zookeeper"),
])
def test_good_zk_urls_parse(text, hosts, path):
    url = ZkUrl.parse(text)
    assert (url.hosts, url.path) == (hosts, path)
    assert str(url) == f"zk://{hosts}{path}"
    assert ZkUrl.parse(str(url)) == url
    assert is_zk_url(text)
    assert parse_master_address(text) == url


@pytest.mark.parametrize("text, reason", [
    ("tcp://h:2181/m", "scheme must be zk://"),
    ("http://h:2181/m", "scheme must be zk://"),
    ("h:2181/m", "scheme must be zk://"),
    ("zk:/h:2181/m", "scheme must be zk://"),
    ("zk://", "no hosts"),
    ("zk:///m", "no hosts"),
    ("zk://h:2181", "path is missing"),
    ("zk://h:2181/", "path is missing"),
    ("zk://h:2181/m/", "ends with '/'"),
    ("zk://h:2181//m", "empty, '.' or '..' component"),
    ("zk://h:2181/a//b", "empty, '.' or '..' component"),
    ("zk://h:2181/a/./b", "empty, '.' or '..' component"),
    ("zk://h:2181/a/..", "empty, '.' or '..' component"),
    ("zk://h:2181/zookeeper", "reserved"),
    ("zk://h:2181/zookeeper/quota", "reserved"),
    ("zk://h:2181/a b", "whitespace or control"),
    ("zk://h:2181/a\x00b", "whitespace or control"),
    ("zk://h/m", "has no port"),
    ("zk://h:2181,/m", "empty host"),
    ("zk://,h:2181/m", "empty host"),
    ("zk://h:2181,,g:2181/m", "empty host"),
    ("zk://:2181/m", "is not a host name"),
    ("zk://h h:2181/m", "is not a host name"),
    ("zk://-h:2181/m", "is not a host name"),
    ("zk://::1:2181/m", "is not a host name"),
    ("zk://h:abc/m", "is not a number"),
    ("zk://h:-1/m", "is not a number"),
    ("zk://h:/m", "is not a number"),
    ("zk://h:0/m", "out of range"),
    ("zk://h:65536/m", "out of range"),
    ("zk://h:99999999999999999999/m", "out of range"),
    ("zk://user:pw@h:2181/m", "credentials"),
    ("zk://h:2181/m?x=1", "query"),
    ("zk://h:2181/m#x", "fragment"),
    ("", "scheme must be zk://"),
])
def test_bad_zk_urls_raise_clear_config_errors(text, reason):
    with pytest.raises(ConfigError, match="bad ZooKeeper URL") as info:
        ZkUrl.parse(text)
    assert reason in str(info.value)
    assert isinstance(info.value, MesoslikeError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [None, 2181, b"zk://h:2181/m", ["zk://h:2181/m"]])
def test_non_strings_are_rejected(value):
    with pytest.raises(ConfigError):
        ZkUrl.parse(value)
    assert not is_zk_url(value)
    with pytest.raises(ConfigError):
        parse_master_address(value)


def test_zk_url_is_a_frozen_value():
    url = ZkUrl.parse("zk://h:2181/m")
    assert url == ZkUrl(hosts="h:2181", path="/m")
    assert len({url, ZkUrl.parse("zk://h:2181/m")}) == 1
    with pytest.raises(AttributeError):
        url.path = "/other"


def test_the_auth_is_no_part_of_a_zk_urls_equality_hash_or_repr(tmp_path):
    # a password never reaches a log (repr, rich's repr), and a URL with credentials is the URL without them
    secret = tmp_path / "zk.auth"
    secret.write_text("master:s3cret\n")
    secret.chmod(0o600)
    plain = ZkUrl.parse("zk://h:2181/m")
    authed = plain.with_auth_file(str(secret))
    assert authed.auth == ("master", "s3cret") and plain.auth is None
    assert authed == plain and not authed != plain and hash(authed) == hash(plain)
    assert authed != ZkUrl("h:2181", "/other", ("master", "s3cret")) and authed != "zk://h:2181/m"
    assert repr(authed) == repr(plain) == "ZkUrl(hosts='h:2181', path='/m')"
    assert "s3cret" not in repr(list(authed.__rich_repr__()))
    with pytest.raises(AttributeError):
        authed.auth = None


def test_is_zk_url_routes_by_scheme_only():
    # a malformed zk:// URL still routes to ZkUrl.parse, whose error says what is wrong
    assert is_zk_url("zk://nonsense")
    assert not is_zk_url("tcp://127.0.0.1:5050")
    with pytest.raises(ConfigError, match="path is missing"):
        parse_master_address("zk://h:2181")


@pytest.mark.parametrize("text", ["tcp://127.0.0.1:5050", "tcp://master-1:0", "tcp://[::1]:65535", " tcp://h:1 "])
def test_tcp_master_addresses_pass_through(text):
    assert parse_master_address(text) == text.strip()


@pytest.mark.parametrize("text", ["tcp://h", "tcp://:5050", "tcp://h:", "tcp://h:x", "tcp://h:65536", "udp://h:1",
                                  "127.0.0.1:5050", "", "tcp://"])
def test_bad_master_addresses_say_what_is_expected(text):
    with pytest.raises(ConfigError, match="tcp://HOST:PORT"):
        parse_master_address(text)


@pytest.mark.parametrize("text", ["tcp://127.0.0.1:5050", "tcp://h:0", "tcp://h", "tcp://:1", "tcp://h:99999",
                                  "tcp://a:b:1", "tcp://h:x", "tcp://h:-1"])
def test_tcp_rules_agree_with_the_transport(text):
    transport = pytest.importorskip("mesoslike.transport")
    try:
        transport.parse_tcp_address(text)
        transport_accepts = True
    except ConfigError:
        transport_accepts = False
    try:
        parse_master_address(text)
        ours_accepts = True
    except ConfigError:
        ours_accepts = False
    assert ours_accepts == transport_accepts


def test_url_module_needs_neither_kazoo_nor_zmq():
    import subprocess
    code = ("import sys; import mesoslike.ha, mesoslike.ha.url; "
            "assert 'kazoo' not in sys.modules and 'zmq' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
