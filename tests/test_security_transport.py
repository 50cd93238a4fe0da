"""Issue 13 §1-§2 at the transport: certificates in pyzmq's format, CURVE
servers that let in only listed keys and name their principal, clients that
talk only to the server whose key they were given (real sockets)."""

import os
import stat

import pytest
from click.testing import CliRunner

from mesoslike.cli import main
from mesoslike.errors import ConfigError
from mesoslike.transport import (Authenticator, Client, CurveKeys, Server, load_certificate, load_public_key,
                                 new_certificate)
from mesoslike.wire import messages as m
from tests.test_transport import receive_one
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(30)


def test_keys_new_writes_a_zmq_auth_pair_with_a_private_secret(tmp_path):
    result = CliRunner().invoke(main, ["keys", "new", "agent1", "--dir", str(tmp_path / "keys")])
    assert result.exit_code == 0, result.output
    public, secret = tmp_path / "keys" / "agent1.key", tmp_path / "keys" / "agent1.key_secret"
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    # pyzmq's zmq.auth format: a "curve" section of public-key / secret-key lines
    assert "curve" in public.read_text() and "secret-key" not in public.read_text()
    assert "public-key = " in secret.read_text() and "secret-key = " in secret.read_text()
    assert load_certificate(str(public))[1] is None                     # read through zmq.auth
    pub, sec = load_certificate(str(secret))
    assert pub == load_certificate(str(public))[0] and sec is not None
    assert sorted(os.listdir(tmp_path / "keys")) == ["agent1.key", "agent1.key_secret"]   # no scratch left
    again = CliRunner().invoke(main, ["keys", "new", "agent1", "--dir", str(tmp_path / "keys")])
    assert again.exit_code == 1 and "exists" in again.output                               # never overwritten


def test_a_secret_file_others_may_read_is_refused_naming_it(tmp_path):
    _, secret = new_certificate(str(tmp_path), "m")
    os.chmod(secret, 0o644)
    with pytest.raises(ConfigError, match=f"{secret}.*0644.*must be 0600"):
        CurveKeys.load(secret)
    os.chmod(secret, 0o600)
    assert CurveKeys.load(secret).public == load_certificate(secret)[0]


def test_public_keys_load_from_a_certificate_or_z85(tmp_path):
    public, _ = new_certificate(str(tmp_path), "x")
    key = load_certificate(public)[0]
    assert load_public_key(public) == key == load_public_key(key.decode())
    assert load_public_key("x.key", base=str(tmp_path)) == key
    with pytest.raises(ConfigError):
        load_public_key("no-such-file")


def test_a_secured_server_names_the_principal_of_a_listed_key_and_refuses_others():
    server_keys, alice, mallory = CurveKeys.generate(), CurveKeys.generate(), CurveKeys.generate()
    authenticator = Authenticator({alice.public: "alice"})
    with Server("tcp://127.0.0.1:0", keys=server_keys, authenticator=authenticator) as server, \
            Client(server.address, keys=alice, server_key=server_keys.public) as good, \
            Client(server.address, keys=mallory, server_key=server_keys.public) as bad, \
            Client(server.address) as anonymous:
        good.send(m.Ping("a"))
        peer, message = receive_one(server)
        assert message == m.Ping("a") and server.principal(peer) == "alice"
        bad.send(m.Ping("b"))
        anonymous.send(m.Ping("c"))
        bad.wait(0.05), anonymous.wait(0.05)
        wait_until(lambda: bad.receive_frames() is not None and bad.stats.handshakes_failed >= 1, 5,
                   "the unlisted key's handshake to fail")
        wait_until(lambda: authenticator.refused >= 1, 5, "the ZAP handler to refuse the unlisted key")
        assert not server.wait(0.3)                      # neither the unlisted key nor the anonymous peer got in
        assert bad.stats.reconnects == 0                 # a refusal is not a dropped connection to make anew


def test_a_refused_client_gets_in_once_the_server_knows_its_key():
    # a new leader may answer before it has read the keys it lets in (a Fuxi service's job keys
    # from its hard state): ZeroMQ never retries a refused handshake, the client must
    server_keys, late = CurveKeys.generate(), CurveKeys.generate()
    known: dict[bytes, str] = {}
    authenticator = Authenticator(known.get)
    with Server("tcp://127.0.0.1:0", keys=server_keys, authenticator=authenticator) as server, \
            Client(server.address, keys=late, server_key=server_keys.public, reconnect_max=0.2) as client:
        client.send(m.Ping("early"))
        wait_until(lambda: list(client.receive_frames()) == [] and client.stats.handshakes_failed >= 1, 5,
                   "the unknown key's handshake to fail")
        known[late.public] = "late"
        client.send(m.Ping("late"))

        def got_in() -> bool:
            list(client.receive_frames())
            if server.wait(0.05):
                return any(message == m.Ping("late") for _, message in server.receive())
            client.send(m.Ping("late"))
            return False
        wait_until(got_in, 10, "the client to get in once its key is known")
        assert client.stats.reconnects == 1              # one connection made anew, not one per retry


def test_a_client_given_the_server_key_does_not_talk_to_another_server():
    real, fake = CurveKeys.generate(), CurveKeys.generate()
    client_keys = CurveKeys.generate()
    with Server("tcp://127.0.0.1:0", keys=fake, authenticator=Authenticator(allow_any=True)) as impostor, \
            Client(impostor.address, keys=client_keys, server_key=real.public) as client:
        client.send(m.Ping("secret"))
        wait_until(lambda: list(client.receive_frames()) == [] and client.stats.handshakes_failed >= 1, 5,
                   "the handshake with the impostor to fail")
        assert not impostor.wait(0.3)


def test_a_frame_under_another_principals_identity_is_dropped():
    server_keys, alice, mallory = CurveKeys.generate(), CurveKeys.generate(), CurveKeys.generate()
    with Server("tcp://127.0.0.1:0", keys=server_keys,
                authenticator=Authenticator({alice.public: "alice", mallory.public: "mallory"})) as server:
        with Client(server.address, keys=alice, server_key=server_keys.public, identity=b"victim") as good:
            good.send(m.Ping("a"))
            assert receive_one(server)[0] == b"victim"
        with Client(server.address, keys=mallory, server_key=server_keys.public, identity=b"victim") as bad:
            bad.send(m.Ping("b"))
            wait_until(lambda: (list(server.receive_frames()), server.stats.impersonations)[1] == 1, 5,
                       "the impersonating frame to be dropped")
        assert server.principal(b"victim") == "alice"


def test_a_server_needs_both_keys_and_authenticator():
    with pytest.raises(ConfigError):
        Server("tcp://127.0.0.1:0", keys=CurveKeys.generate())
    with pytest.raises(ConfigError):
        Client("tcp://127.0.0.1:1", keys=CurveKeys.generate())
    keys = CurveKeys.generate()
    assert keys.secret.decode() not in repr(keys)
