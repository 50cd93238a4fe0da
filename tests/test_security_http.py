"""Issue 13 §6: the master's HTTP with credentials — operator writes need a
bearer token (401 without, 403 without the permission), reads too with
``http_auth="all"``, and TLS (a self-signed certificate made with the
system's openssl)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from mesoslike.credentials import load_credentials
from mesoslike.master.http import tls_context
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from mesoslike.v1 import RecordDecoder
from tests.environment import unavailable
from tests.security_helpers import SecuredKeys

pytestmark = pytest.mark.timeout(60)


def request(url: str, body: object | None = None, token: str | None = None,
            context: ssl.SSLContext | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=10,
                                    context=context) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def v1_subscribed_over_tls(master: MasterRuntime, context: ssl.SSLContext, principal: str, secret: str) -> int:
    """The status of a v1 SUBSCRIBE over HTTPS; when 200, its stream's first
    event is SUBSCRIBED with the framework's id."""
    port = int(master.http_address.rsplit(":", 1)[1])
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "tls", "user": "nobody"}}}
        credential = base64.b64encode(f"{principal}:{secret}".encode()).decode()
        connection.request("POST", "/api/v1/scheduler", body=json.dumps(call).encode(),
                           headers={"Content-Type": "application/json", "Authorization": f"Basic {credential}"})
        response = connection.getresponse()
        if response.status != 200:
            return response.status
        assert response.getheader("Mesos-Stream-Id")
        decoder, records = RecordDecoder(), []
        while not records:
            piece = response.read1(65536)
            assert piece, "the stream ended before its first event"
            records += decoder.feed(piece)
        event = json.loads(records[0])
        assert event["type"] == "SUBSCRIBED" and event["subscribed"]["framework_id"]["value"]
        return response.status
    finally:
        connection.close()


@pytest.fixture
def keys(tmp_path):
    return SecuredKeys(tmp_path)


def secured_master(keys: SecuredKeys, **options) -> MasterRuntime:
    master = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0, keys=keys.keys("master"),
                                          credentials=load_credentials(str(keys.credentials)), **options))
    master.start()
    return master


def test_operator_writes_need_a_token_with_the_permission(keys):
    master = secured_master(keys)
    try:
        starve = {"role": "*", "limit": "cpus:0.001;mem:1"}
        code, reply = request(master.http_address + "/quota", starve)
        assert code == 401 and "Bearer" in reply["error"]
        assert request(master.http_address + "/weights", {"*": 5})[0] == 401
        assert request(master.http_address + "/quota", starve, token="wrong")[0] == 401
        assert master.state()["roles"] == [] or all(not r.get("quota") for r in master.state()["roles"])
        assert request(master.http_address + "/state")[0] == 200              # reads stay open ("writes")
        code, _ = request(master.http_address + "/quota", {"role": "ops", "guarantee": "cpus:1", "force": True}, token=keys.token)
        assert code == 200
        metrics = urllib.request.urlopen(master.http_address + "/metrics", timeout=5).read().decode()
        assert "mesoslike_http_unauthenticated_total 3" in metrics
    finally:
        master.stop()


def test_a_token_without_the_permission_is_forbidden(keys):
    text = keys.credentials.read_text().replace('[[acls.update_weights]]\nprincipals = ["ops"]',
                                                '[[acls.update_weights]]\nprincipals = ["fwA"]')
    keys.credentials.write_text(text)
    master = secured_master(keys)
    try:
        code, reply = request(master.http_address + "/weights", {"*": 5}, token=keys.token)
        assert code == 403 and "lacks the update_weights permission" in reply["error"]
    finally:
        master.stop()


def test_http_auth_all_guards_reads_too(keys):
    master = secured_master(keys, http_auth="all")
    try:
        assert request(master.http_address + "/state")[0] == 401
        assert request(master.http_address + "/state", token=keys.token)[0] == 200
    finally:
        master.stop()


def test_http_over_tls(keys, tmp_path):
    if shutil.which("openssl") is None:
        unavailable("openssl (the system's) is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True)
    os.chmod(key, 0o644)
    with pytest.raises(Exception, match="must be 0600"):
        tls_context(str(cert), str(key))
    os.chmod(key, 0o600)
    master = secured_master(keys, http_tls=tls_context(str(cert), str(key)))
    try:
        assert master.http_address.startswith("https://")
        client = ssl.create_default_context(cafile=str(cert))
        assert request(master.http_address + "/health", context=client)[0] == 200
        assert request(master.http_address + "/quota", {"role": "*"}, context=client)[0] == 401
        # Mesos's v1 scheduler API over TLS too: HTTP Basic (a framework principal and its token), its event stream
        assert v1_subscribed_over_tls(master, client, "fwA", keys.framework_tokens["fwA"]) == 200
        assert v1_subscribed_over_tls(master, client, "fwA", "wrong") == 401
        with pytest.raises((OSError, http.client.HTTPException)):     # plain HTTP gets no answer
            urllib.request.urlopen(master.http_address.replace("https", "http") + "/health", timeout=5).read()
    finally:
        master.stop()
