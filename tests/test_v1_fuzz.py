"""Fuzzing Mesos's v1 HTTP APIs like the ZeroMQ frames (tests/test_fuzz.py;
docs/reliability.rst): the RecordIO decoder on any bytes cut anywhere
(bounded, total: records or RecordIOError), and a master process given a few
thousand hostile v1 calls — random bytes, mutated valid calls, deep nesting,
huge numbers, wrong types, bad base64, an oversize body — that must still
serve a v1 scheduler afterwards with its memory bounded."""

from __future__ import annotations

import base64
import http.client
import json
import random
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e2e_helpers import cluster  # noqa: F401 (a fixture)
from mesoslike.master.v1_api import MAX_CALL_BODY
from mesoslike.v1 import RecordDecoder, RecordIOError, encode_record
from stress_helpers import rss_kib
from v1_helpers import EventStream, basic

pytestmark = pytest.mark.timeout(240)

SEED = 20261128
RSS_GROWTH_LIMIT_KIB = 64 * 1024


# ------------------------------------------------------------- the decoder
@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_any_cut_of_a_stream_gives_its_records(records, cuts):
    stream = b"".join(encode_record(record) for record in records)
    decoder, found, at = RecordDecoder(max_record=300), [], 0
    for size in cuts * (len(stream) // max(1, sum(cuts)) + 1):
        found += decoder.feed(stream[at:at + size])
        at += size
    assert at >= len(stream) and found == records and decoder.buffered == 0


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=30))
def test_any_bytes_give_records_or_a_recordio_error_and_stay_bounded(pieces):
    decoder = RecordDecoder(max_record=1000)
    try:
        for piece in pieces:
            for record in decoder.feed(piece):
                assert len(record) <= 1000
            assert decoder.buffered <= 1000 + len("1000")
    except RecordIOError:
        with pytest.raises(RecordIOError):   # broken for good: a framing error cannot be skipped
            decoder.feed(b"1\nx")


def test_a_length_beyond_the_bound_is_refused_before_its_bytes_are_held():
    decoder = RecordDecoder(max_record=1 << 20)
    with pytest.raises(RecordIOError, match="longer than the bound"):
        decoder.feed(b"1048577\n")
    with pytest.raises(RecordIOError, match="more digits"):
        RecordDecoder(max_record=10).feed(b"123")
    assert RecordDecoder(max_record=10).feed(b"") == []


# ------------------------------------------------------------ a master process
def hostile_calls(rng: random.Random, count: int):
    """(kind, body, headers) of hostile v1 calls."""
    valid = [
        {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "f", "user": "nobody"}}},
        {"type": "ACCEPT", "framework_id": {"value": "f"}, "accept": {"offer_ids": [{"value": "o"}], "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [{"task_id": {"value": "t"}, "agent_id": {"value": "a"},
                                                          "command": {"value": "true"}, "resources": []}]}}]}},
        {"type": "MESSAGE", "framework_id": {"value": "f"}, "message": {"agent_id": {"value": "a"},
                                                                        "executor_id": {"value": "e"}, "data": "AA=="}},
        {"type": "RECONCILE", "framework_id": {"value": "f"}, "reconcile": {"tasks": [{"task_id": {"value": "t"}}]}},
        {"type": "GET_STATE"}, {"type": "SUBSCRIBE"},
    ]
    weird = [None, True, -1, 10 ** 400, 1e308, "", "x" * 70000, [], {}, [[[]]], "%%%", {"value": None}]
    for _ in range(count):
        kind = rng.choice(["bytes", "mutated", "nested", "weird-type", "wrong-media", "bad-base64"])
        headers = {"Content-Type": "application/json"}
        if kind == "bytes":
            body = rng.randbytes(rng.randint(0, 2000))
        elif kind == "nested":
            depth = rng.randint(100, 100000)
            body = ("[" * depth + "]" * depth).encode()
        elif kind == "wrong-media":
            headers["Content-Type"] = rng.choice(["text/plain", "application/x-protobuf", "", "application/json;;;"])
            body = json.dumps(rng.choice(valid)).encode()
        else:
            call = json.loads(json.dumps(rng.choice(valid)))
            node = call
            for _ in range(rng.randint(0, 4)):
                if not isinstance(node, dict) or not node:
                    break
                key = rng.choice(sorted(node))
                if rng.random() < 0.5 or not isinstance(node[key], dict):
                    node[key] = base64.b64encode(rng.randbytes(9)).decode() + "%" if kind == "bad-base64" \
                        else rng.choice(weird)
                    break
                node = node[key]
            body = json.dumps(call).encode()
            if rng.random() < 0.2:
                body = body[:rng.randint(0, len(body))]
        if rng.random() < 0.3:
            headers["Mesos-Stream-Id"] = rng.choice(["", "x" * 300, "00000000-0000-0000-0000-000000000000"])
        if rng.random() < 0.2:
            headers["Authorization"] = rng.choice(["Basic !!!", "Basic " + base64.b64encode(b"fwA").decode(),
                                                   "Bearer " + "y" * 5000, "Digest x"])
        yield kind, rng.choice(["/api/v1/scheduler", "/api/v1", "/api/v1/operator"]), body, headers


def test_the_master_survives_hostile_v1_calls_and_still_serves_a_v1_scheduler(cluster):  # noqa: F811
    cluster.start_master()
    pid = cluster.master.pid
    rss_before = rss_kib(pid)
    rng = random.Random(SEED)
    statuses: dict[int, int] = {}
    connection = http.client.HTTPConnection("127.0.0.1", cluster.http_port, timeout=30)
    try:
        for _, path, body, headers in hostile_calls(rng, 2500):
            try:
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
                statuses[response.status] = statuses.get(response.status, 0) + 1
                if response.getheader("Content-Length") is None:   # a stream was opened: leave it
                    connection.close()
                else:
                    response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
    finally:
        connection.close()
    with socket.create_connection(("127.0.0.1", cluster.http_port), timeout=30) as raw:   # refused by its head
        raw.sendall(b"POST /api/v1/scheduler HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n{" % (MAX_CALL_BODY + 1))
        assert raw.recv(100).startswith(b"HTTP/1.1 413 ")
    assert set(statuses) <= {200, 202, 400, 401, 403, 405, 406, 415, 501}, statuses
    assert statuses.get(400, 0) > 1000 and 500 not in statuses
    # still serving: a real v1 scheduler subscribes and is offered the agent's resources
    cluster.start_agent("node-a", "cpus:1;mem:256")
    stream = EventStream(cluster.http + "/api/v1/scheduler",
                         {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "after", "user": "nobody"}}},
                         basic("fwA", cluster.keys.framework_tokens["fwA"]))
    try:
        stream.wait_for("SUBSCRIBED")
        stream.wait_for("OFFERS")
    finally:
        stream.close()
    assert cluster.master.running()
    grown = rss_kib(pid) - rss_before
    assert grown < RSS_GROWTH_LIMIT_KIB, f"RSS grew by {grown} KiB"
