"""The frames of the two Fuxi protocols' messages (protocol.py, am_protocol.py),
msgspec Structs since they were attrs classes: pinned against the frames the
attrs classes wrote (recorded at f3c3947). Each field's key and value are the
same bytes; only the order of the map's entries differs — the attrs classes'
came in name order (msgspec writes a slotted attrs object's so), a Struct's
come as declared — which no decoder reads: a frame of before decodes to the
very same message (a peer of before, a worker started by the old code, is
understood), and both sides' own encoders (client_wire, worker_wire) write
the new order (their tests hold them to the codec byte for byte)."""

from __future__ import annotations

import msgpack
import msgspec
import pytest

from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol as p

pytestmark = pytest.mark.timeout(30)


def _samples() -> list:
    """One message of every class (two of some: every field set, and at its defaults)."""
    return [
        p.Submit(1, {"job": {"name": "j", "units": [{"name": "u", "slots": 2, "cpus": 0.5, "x": True, "y": None}]}}),
        p.Submitted(2, "job-1"), p.Status(3), p.Status(4, "job-1"), p.StatusReply(5, '{"jobs": []}'),
        p.KillJob(6, "job-2"), p.Error(7, "no such job"), p.Ok(8), p.SetDesire(9, "job-1", "t0ken", "map", 16),
        p.ReleaseSlot(10, "job-1", "t0ken", "job-1.map.3"), p.AvoidHosts(11, "job-1", "t0ken", "map", ["h1", "h2"]),
        p.BlacklistHost(12, "job-1", "t0ken", "h3"), p.ReportHost(13, "job-1", "t0ken", "h4"),
        p.Progress(14, "job-1", "t0ken", {"done": 3, "units": {"map": [1, 2.5]}, "slots": {}}),
        p.JobEnded(15, "job-1", "t0ken", False, "instance 3 failed"),
        p.SlotGranted("job-1", "job-1.map.3", "map", "node-1", "er0"),
        p.SlotRevoked("job-1", "job-1.map.3", "preempted"),
        amp.Hello("job-1.u.0", "u", "node-1", "er0", [3, 1], [[0, 1, True, "exit status 0"], [1, 0, False, "boom"]],
                  "t0ken", "agent-1", [4, 0]),
        amp.Hello("s", "u", "h"), amp.Heartbeat("s", [3, 1], [4, 0]), amp.Heartbeat("s"),
        amp.Progress("s", 1, 2, 0.25), amp.Done("s", 1, 1, False, "exit status 1: boom"), amp.Done("s", 0, 0, True),
        amp.Bye("s", "killed (SIGTERM)"), amp.Bye("s"), amp.Welcome("s"), amp.Rejoin(),
        amp.Assign(7, 2, "echo hi", {"A": "b", "FUXI_X": ""}, [[1, 0], [2, 1]]), amp.Assign(0, 0, "true"),
        amp.Kill(1, 2), amp.Ack(1, 2), amp.Release(), amp.Error("no"),
    ]


#: each sample's frame as the attrs classes wrote it (f3c3947), in hex
BEFORE = [
    '84a17601a474797065a65355424d4954a8646f63756d656e7481a36a6f6282a46e616d65a16aa5756e6974739185a46e'
     '616d65a175a5736c6f747302a463707573cb3fe0000000000000a178c3a179c0a2696401',
    '84a17601a474797065a95355424d4954544544a2696402a66a6f625f6964a56a6f622d31',
    '84a17601a474797065a6535441545553a2696403a66a6f625f6964a0',
    '84a17601a474797065a6535441545553a2696404a66a6f625f6964a56a6f622d31',
    '84a17601a474797065ac5354415455535f5245504c59a8646f63756d656e74ac7b226a6f6273223a205b5d7da2696405',
    '84a17601a474797065a44b494c4ca2696406a66a6f625f6964a56a6f622d32',
    '84a17601a474797065a54552524f52a2696407a76d657373616765ab6e6f2073756368206a6f62',
    '83a17601a474797065a24f4ba2696408',
    '87a17601a474797065aa5345545f444553495245a2696409a66a6f625f6964a56a6f622d31a5736c6f747310a5746f6b'
     '656ea574306b656ea4756e6974a36d6170',
    '86a17601a474797065ac52454c454153455f534c4f54a269640aa66a6f625f6964a56a6f622d31a4736c6f74ab6a6f62'
     '2d312e6d61702e33a5746f6b656ea574306b656e',
    '87a17601a474797065ab41564f49445f484f535453a5686f73747392a26831a26832a269640ba66a6f625f6964a56a6f'
     '622d31a5746f6b656ea574306b656ea4756e6974a36d6170',
    '86a17601a474797065ae424c41434b4c4953545f484f5354a4686f7374a26833a269640ca66a6f625f6964a56a6f622d'
     '31a5746f6b656ea574306b656e',
    '86a17601a474797065ab5245504f52545f484f5354a4686f7374a26834a269640da66a6f625f6964a56a6f622d31a574'
     '6f6b656ea574306b656e',
    '86a17601a474797065a850524f4752455353a269640ea66a6f625f6964a56a6f622d31a67265706f727483a4646f6e65'
     '03a5756e69747381a36d61709201cb4004000000000000a5736c6f747380a5746f6b656ea574306b656e',
    '87a17601a474797065a94a4f425f454e444544a269640fa66a6f625f6964a56a6f622d31a6726561736f6eb1696e7374'
     '616e63652033206661696c6564a9737563636565646564c2a5746f6b656ea574306b656e',
    '87a17601a474797065ac534c4f545f4752414e544544a8686f73746e616d65a66e6f64652d31a66a6f625f6964a56a6f'
     '622d31a4726f6f6da3657230a4736c6f74ab6a6f622d312e6d61702e33a4756e6974a36d6170',
    '85a17601a474797065ac534c4f545f5245564f4b4544a66a6f625f6964a56a6f622d31a6726561736f6ea9707265656d'
     '70746564a4736c6f74ab6a6f622d312e6d61702e33',
    '8ba17601a474797065a548454c4c4fa86167656e745f6964a76167656e742d31a866696e697368656492940001c3ad65'
     '786974207374617475732030940100c2a4626f6f6da8686f73746e616d65a66e6f64652d31a6717565756564920400a4'
     '726f6f6da3657230a772756e6e696e67920301a4736c6f74a96a6f622d312e752e30a5746f6b656ea574306b656ea475'
     '6e6974a175',
    '8ba17601a474797065a548454c4c4fa86167656e745f6964a0a866696e697368656490a8686f73746e616d65a168a671'
     '7565756564c0a4726f6f6da0a772756e6e696e67c0a4736c6f74a173a5746f6b656ea0a4756e6974a175',
    '85a17601a474797065a9484541525442454154a6717565756564920400a772756e6e696e67920301a4736c6f74a173',
    '85a17601a474797065a9484541525442454154a6717565756564c0a772756e6e696e67c0a4736c6f74a173',
    '86a17601a474797065a850524f4752455353a7617474656d707402a86672616374696f6ecb3fd0000000000000a8696e'
     '7374616e636501a4736c6f74a173',
    '87a17601a474797065a4444f4e45a7617474656d707401a8696e7374616e636501a76d657373616765b3657869742073'
     '746174757320313a20626f6f6da26f6bc2a4736c6f74a173',
    '87a17601a474797065a4444f4e45a7617474656d707400a8696e7374616e636500a76d657373616765a0a26f6bc3a473'
     '6c6f74a173',
    '84a17601a474797065a3425945a6726561736f6eb06b696c6c656420285349475445524d29a4736c6f74a173',
    '84a17601a474797065a3425945a6726561736f6ea0a4736c6f74a173',
    '83a17601a474797065a757454c434f4d45a4736c6f74a173',
    '82a17601a474797065a652454a4f494e',
    '87a17601a474797065a641535349474ea461636b7392920100920201a7617474656d707402a7636f6d6d616e64a76563'
     '686f206869a3656e7682a141a162a6465558495f58a0a8696e7374616e636507',
    '87a17601a474797065a641535349474ea461636b7390a7617474656d707400a7636f6d6d616e64a474727565a3656e76'
     '80a8696e7374616e636500',
    '84a17601a474797065a44b494c4ca7617474656d707402a8696e7374616e636501',
    '84a17601a474797065a341434ba7617474656d707402a8696e7374616e636501',
    '82a17601a474797065a752454c45415345',
    '83a17601a474797065a54552524f52a76d657373616765a26e6f',
]


#: fields declared since the pin, by message type: optional, at the end (a peer of before ignores them,
#: and a frame of before decodes with their defaults)
ADDED_SINCE = {"STATUS": ("wait",)}


def _codec(message: object):
    return amp.CODEC if type(message).__module__ == amp.__name__ else p.CODEC


def _entries(frame: bytes) -> list[tuple[str, bytes]]:
    """The map's entries of ``frame``: each key, with the raw bytes of its key and value."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(frame)
    out = []
    for _ in range(unpacker.read_map_header()):
        start = unpacker.tell()
        key = unpacker.unpack()
        unpacker.skip()
        out.append((key, frame[start:unpacker.tell()]))
    assert unpacker.tell() == len(frame)
    return out


def test_every_message_class_is_pinned():
    classes = {type(message) for message in _samples()}
    assert classes == {*p.SCHEMA.types.values(), *amp.SCHEMA.types.values()}
    assert len(_samples()) == len(BEFORE)


@pytest.mark.parametrize("index", range(len(BEFORE)), ids=lambda i: repr(_samples()[i])[:60])
def test_a_frame_is_the_one_of_before_its_entries_in_the_order_declared(index):
    message, before = _samples()[index], bytes.fromhex(BEFORE[index])
    frame = _codec(message).encode(message)
    added = ADDED_SINCE.get(message.TYPE, ())
    old, new = _entries(before), _entries(frame)
    assert len(new) == len(old) + len(added)   # the map's header: as many entries, and those added since
    assert sorted(entry for entry in new if entry[0] not in added) == sorted(old)   # each entry byte for byte
    assert [key for key, _ in new[len(new) - len(added):]] == list(added)   # (declared last: a new field)
    assert [key for key, _ in new] == ["v", "type", *(f.name for f in msgspec.structs.fields(type(message)))]
    assert [key for key, _ in old[2:]] == sorted(key for key, _ in old[2:])   # (the attrs classes': by name)


@pytest.mark.parametrize("index", range(len(BEFORE)), ids=lambda i: repr(_samples()[i])[:60])
def test_a_frame_of_before_decodes_to_the_same_message(index):
    message, before = _samples()[index], bytes.fromhex(BEFORE[index])
    codec = _codec(message)
    for decoded in (codec._decode_compiled(before), codec._decode_checked(before, codec.max_message_size)):
        assert type(decoded) is type(message) and decoded == message   # (both of the codec's decoders)
    assert codec.decode(codec.encode(message)) == message


@pytest.mark.parametrize("codec, plain, reason", [
    (amp.CODEC, {"type": "PROGRESS", "slot": "s", "instance": 1, "attempt": 0, "fraction": 2.0},
     "PROGRESS.fraction: must be in [0, 1], got 2.0"),
    (amp.CODEC, {"type": "HELLO", "slot": "s", "unit": "u", "hostname": "h", "running": [-1, 0]},
     "HELLO.running[0]: must be >= 0, got -1"),
    (amp.CODEC, {"type": "HELLO", "slot": "s", "unit": "u", "hostname": "h", "finished": [[0, 0, 1, "x"]]},
     "HELLO.finished[0][2]: expected bool, got int 1"),
    (amp.CODEC, {"type": "ASSIGN", "instance": 1, "attempt": 0, "command": "x", "env": {"A": 1}},
     "ASSIGN.env['A']: expected str, got int 1"),
    (p.CODEC, {"type": "SET_DESIRE", "id": 1, "job_id": "j", "token": "t", "unit": "u", "slots": True},
     "SET_DESIRE.slots: expected int, got bool True"),
    (p.CODEC, {"type": "JOB_ENDED", "id": 1, "job_id": "j", "token": "t", "succeeded": True}, "JOB_ENDED.reason: missing"),
], ids=lambda value: value.get("type") if isinstance(value, dict) else None)
def test_a_bad_field_is_still_named(codec, plain, reason):
    with pytest.raises(p.ProtocolError) as info:
        codec.decode(msgpack.packb({"v": 1, **plain}))
    assert str(info.value) == reason
