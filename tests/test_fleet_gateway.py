"""deploy/fleet_gateway.py in process, in front of a recording stand-in for the SuperLink: what
it forwards and what it refuses (a reply sent as another node, objects of another node's
messages, unsigned calls, bulk from a key the SuperLink never accepted)."""

import base64
import datetime
import importlib.util

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.proto.fleet_pb2 import PullMessagesRequest, PullMessagesResponse, PushMessagesRequest
from flwr.proto.message_pb2 import (
    Message,
    Metadata,
    ObjectTree,
    PullObjectRequest,
    PushObjectRequest,
)
from flwr.proto.node_pb2 import Node
from flwr.supercore.primitives.asymmetric import public_key_to_bytes, sign_message
from starlette.testclient import TestClient

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("fleet_gateway", ROOT / "deploy/fleet_gateway.py")
gateway = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gateway)

TREE = ObjectTree(
    object_id="msg-root",
    children=[ObjectTree(object_id="rec-a", children=[ObjectTree(object_id="arr-1")])],
)


class Upstream:
    """Records what reaches the SuperLink; answers pull-messages with a message for node 7."""

    def __init__(self):
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request.url.path)
        if request.url.path.endswith("pull-messages"):
            reply = PullMessagesResponse(
                messages_list=[Message(metadata=Metadata(dst_node_id=7))],
                message_object_trees=[TREE],
            )
            return httpx.Response(200, content=reply.SerializeToString())
        return httpx.Response(200, content=b"")


@pytest.fixture
def gw():
    up = Upstream()
    app = gateway.build_app(
        "http://superlink", False, signed=True, transport=httpx.MockTransport(up)
    )
    with TestClient(app) as client:
        yield client, up


def signed(key=None, when=None) -> dict:
    key = key or ec.generate_private_key(ec.SECP384R1())
    stamp = (when or datetime.datetime.now(datetime.UTC)).isoformat()
    return {
        "content-type": "application/protobuf",
        "flwr-public-key": base64.b64encode(public_key_to_bytes(key.public_key())).decode(),
        "flwr-timestamp": stamp,
        "flwr-signature": base64.b64encode(sign_message(key, stamp.encode())).decode(),
    }


def push(own: int, as_node: int) -> bytes:
    msg = Message(metadata=Metadata(src_node_id=as_node, dst_node_id=1))
    return PushMessagesRequest(
        node=Node(node_id=own), messages_list=[msg], message_object_trees=[TREE]
    ).SerializeToString()


def test_a_reply_is_forwarded_only_from_the_node_it_names(gw):
    client, up = gw
    key = ec.generate_private_key(ec.SECP384R1())
    r = client.post("/v1/fleet/push-messages", content=push(8, 7), headers=signed(key))
    assert r.status_code == 403 and "node 8 pushed a reply as node 7" in r.text
    assert up.calls == []  # the SuperLink never saw it
    assert client.post(
        "/v1/fleet/push-messages", content=push(7, 7), headers=signed(key)
    ).is_success
    assert up.calls == ["/v1/fleet/push-messages"]


def test_a_node_pulls_only_objects_of_messages_delivered_to_it(gw):
    client, up = gw

    def pull(node: int, oid: str) -> int:
        body = PullObjectRequest(node=Node(node_id=node), run_id=1, object_id=oid)
        return client.post(
            "/v1/fleet/pull-object", content=body.SerializeToString(), headers=signed()
        ).status_code

    assert pull(7, "arr-1") == 403  # nothing delivered yet
    ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()
    assert client.post("/v1/fleet/pull-messages", content=ask, headers=signed()).is_success
    assert pull(7, "arr-1") == 200 and pull(7, "msg-root") == 200
    assert pull(9, "arr-1") == 403  # another node asks for node 7's objects
    assert up.calls.count("/v1/fleet/pull-object") == 2


def test_a_node_pushes_only_objects_of_its_own_replies(gw):
    client, _ = gw
    key = ec.generate_private_key(ec.SECP384R1())

    def upload(oid: str) -> int:
        body = PushObjectRequest(node=Node(node_id=7), run_id=1, object_id=oid, object_content=b"x")
        return client.post(
            "/v1/fleet/push-object", content=body.SerializeToString(), headers=signed(key)
        ).status_code

    assert upload("arr-1") == 403
    client.post("/v1/fleet/push-messages", content=push(7, 7), headers=signed(key))
    assert upload("arr-1") == 200 and upload("elsewhere") == 403


def test_unsigned_stale_or_forged_signatures_are_refused_before_the_body(gw):
    client, up = gw
    body = push(7, 7)
    assert client.post("/v1/fleet/push-messages", content=body).status_code == 401
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10)
    assert (
        client.post("/v1/fleet/push-messages", content=body, headers=signed(when=old)).status_code
        == 401
    )
    other = signed()
    other["flwr-signature"] = signed()["flwr-signature"]  # someone else's signature
    assert client.post("/v1/fleet/push-messages", content=body, headers=other).status_code == 401
    assert up.calls == []


def test_bulk_waits_until_the_superlink_has_accepted_the_key(gw):
    client, up = gw
    key = ec.generate_private_key(ec.SECP384R1())
    big = PushObjectRequest(node=Node(node_id=7), object_id="arr-1", object_content=b"\0" * 200_000)
    r = client.post("/v1/fleet/push-object", content=big.SerializeToString(), headers=signed(key))
    assert r.status_code == 413 and "65536" in r.text and up.calls == []
    ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()
    assert client.post("/v1/fleet/pull-messages", content=ask, headers=signed(key)).is_success
    client.post("/v1/fleet/push-messages", content=push(7, 7), headers=signed(key))
    r = client.post("/v1/fleet/push-object", content=big.SerializeToString(), headers=signed(key))
    assert r.status_code == 200  # a key the SuperLink answered 200 may send up to --max-body


def test_a_body_that_is_not_the_calls_protobuf_is_refused_naming_the_call(gw):
    client, up = gw
    r = client.post("/v1/fleet/push-messages", content=b"\xff\xff\xff", headers=signed())
    assert r.status_code == 400 and "/v1/fleet/push-messages" in r.text and up.calls == []
    assert client.get("/v1/control/list-runs").status_code == 403


def test_a_signature_acts_once_and_only_within_30_seconds(gw):
    """A captured request replayed (here with another body) is refused once the SuperLink
    answered it; a timestamp older than 30 s is refused (Flower itself allows 305 s)."""
    client, up = gw
    key = ec.generate_private_key(ec.SECP384R1())
    ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()
    headers = signed(key)
    assert client.post("/v1/fleet/pull-messages", content=ask, headers=headers).status_code == 200
    again = client.post("/v1/fleet/push-messages", content=push(7, 7), headers=headers)
    assert again.status_code == 401 and "already used" in again.text
    stale = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=45)
    assert (
        client.post("/v1/fleet/pull-messages", content=ask, headers=signed(key, stale)).status_code
        == 401
    )
    assert up.calls == ["/v1/fleet/pull-messages"]


def test_a_key_the_superlink_never_registered_is_refused_before_its_body(tmp_path):
    """With the SuperLink's database, an unregistered key's call is answered 401 without a
    byte of its body read; a registered key goes through."""
    import sqlite3

    mine = ec.generate_private_key(ec.SECP384R1())
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE node (node_id INTEGER, public_key BLOB, status TEXT)")
        c.execute(
            "INSERT INTO node VALUES (7, ?, 'online')", (public_key_to_bytes(mine.public_key()),)
        )
    up = Upstream()
    app = gateway.build_app(
        "http://superlink",
        False,
        signed=True,
        transport=httpx.MockTransport(up),
        registered=gateway.Registry(str(db)),
    )
    ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()
    with TestClient(app) as client:
        r = client.post("/v1/fleet/pull-messages", content=ask, headers=signed())
        assert r.status_code == 401 and "no node registered" in r.text
        assert client.post("/v1/fleet/pull-messages", content=ask, headers=signed(mine)).is_success
    assert up.calls == ["/v1/fleet/pull-messages"]


def test_a_trickled_body_is_cut_at_its_deadline():
    """One byte every 5 s held a gateway slot forever; a body must arrive at min_rate from
    its first byte (here 10 s + 60,000 bytes at 60 kB/s = 11 s; the test shortens time)."""
    import asyncio

    async def run():
        sent = {"n": 0}

        async def receive():
            await asyncio.sleep(0.05)
            sent["n"] += 1
            return {"type": "http.request", "body": b"\0", "more_body": True}

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/fleet/get-run",
            "headers": [(b"content-length", b"60000")],
        }
        from starlette.requests import Request

        request = Request(scope, receive)
        real = asyncio.wait_for

        async def quick(aw, timeout):  # the deadline as computed, in a hundredth of the time
            return await real(aw, timeout / 100)

        gateway.asyncio.wait_for = quick
        try:
            with pytest.raises(gateway.Refused, match="not received within 11 s"):
                await gateway.read_body(request, 64 * 1024, min_rate=60_000)
        finally:
            gateway.asyncio.wait_for = real
        return sent["n"]

    assert asyncio.run(run()) < 10  # cut after ~0.11 s of trickling, not at the end


def test_one_source_address_holds_at_most_its_share_of_the_gateway():
    """Calls from one address (the edge's X-Forwarded-For) beyond `calls_per_source` in
    progress are answered 503 at once; another address still gets in; the count is released
    when the calls end."""
    import asyncio

    class Held(httpx.AsyncBaseTransport):
        def __init__(self):
            self.release, self.calls = asyncio.Event(), 0

        async def handle_async_request(self, request):
            self.calls += 1
            await self.release.wait()
            return httpx.Response(200, content=b"")

    async def run():
        up = Held()
        app = gateway.build_app("http://superlink", False, signed=False, transport=up,
                                calls_per_source=2)  # fmt: skip
        ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:

            def call(source):
                return client.post("/v1/fleet/pull-messages", content=ask,
                                   headers={"x-forwarded-for": source})  # fmt: skip

            held = [asyncio.ensure_future(call("10.0.0.1")) for _ in range(2)]
            other = asyncio.ensure_future(call("10.0.0.2"))
            while up.calls < 3:
                await asyncio.sleep(0.01)
            third = await call("10.0.0.1")
            up.release.set()
            done = [r.status_code for r in await asyncio.gather(*held, other)]
            after = await call("10.0.0.1")
        return third, done, after, up.calls

    third, done, after, calls = asyncio.run(run())
    assert third.status_code == 503 and "2 calls from 10.0.0.1 in progress" in third.text
    assert done == [200, 200, 200] and after.status_code == 200 and calls == 4


def _twin(signature_b64: str) -> str:
    """The same ECDSA signature spelled (r, n - s): as valid as (r, s) for the same message."""
    from cryptography.hazmat.primitives.asymmetric.utils import (
        decode_dss_signature,
        encode_dss_signature,
    )

    n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973
    r, s = decode_dss_signature(base64.b64decode(signature_b64))
    return base64.b64encode(encode_dss_signature(r, n - s)).decode()


def _respelled(b64: str) -> str:
    """The same bytes in base64 with other unused trailing bits (Python's decoder ignores them)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    body = b64.rstrip("=")
    unused = {1: 4, 2: 2}.get(len(base64.b64decode(b64)) % 3, 0)  # bits the last char wastes
    assert unused, "a length with no unused bits: nothing to respell"
    last = alphabet.index(body[-1]) ^ 1  # flip the lowest (unused) bit
    return body[:-1] + alphabet[last] + "=" * (len(b64) - len(body))


def test_a_signature_acts_once_however_it_is_spelled(gw):
    """issue 62: the twin (r, n - s) of a used signature, and the same signature in base64 with
    other unused bits, are the same permission and are refused once it was used."""
    client, up = gw
    key = ec.generate_private_key(ec.SECP384R1())
    ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()
    for _ in range(20):  # a signature whose base64 wastes bits (most DER lengths do)
        headers = signed(key)
        if len(base64.b64decode(headers["flwr-signature"])) % 3:
            break
    twin = {**headers, "flwr-signature": _twin(headers["flwr-signature"])}
    respelled = {**headers, "flwr-signature": _respelled(headers["flwr-signature"])}
    assert twin["flwr-signature"] != headers["flwr-signature"] != respelled["flwr-signature"]
    assert base64.b64decode(respelled["flwr-signature"]) == base64.b64decode(
        headers["flwr-signature"]
    )
    gateway.check_signature(twin, datetime.datetime.now(datetime.UTC))  # both verify
    gateway.check_signature(respelled, datetime.datetime.now(datetime.UTC))
    assert client.post("/v1/fleet/pull-messages", content=ask, headers=headers).status_code == 200
    for again in (twin, respelled):
        r = client.post("/v1/fleet/pull-messages", content=ask, headers=again)
        assert r.status_code == 401 and "already used" in r.text
    assert up.calls == ["/v1/fleet/pull-messages"]


def test_32_copies_of_one_signature_at_once_act_once_and_a_5xx_gives_it_back():
    """32 copies of one signed call sent at once from 4 addresses: one reaches the SuperLink,
    31 are refused. A call the SuperLink answered 5xx did not act: its signature may be used
    again (an honest node's retry)."""
    import asyncio

    calls, answer = [], {"status": 200}

    async def upstream(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        await asyncio.sleep(0.05)  # the SuperLink takes a while: the copies overlap
        return httpx.Response(answer["status"], content=b"")

    app = gateway.build_app(
        "http://superlink", False, signed=True, transport=httpx.MockTransport(upstream)
    )
    key = ec.generate_private_key(ec.SECP384R1())
    ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()

    async def main():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as c:
            headers = signed(key)
            got = await asyncio.gather(
                *(
                    c.post(
                        "/v1/fleet/pull-messages",
                        content=ask,
                        headers={**headers, "x-forwarded-for": f"10.9.9.{k % 4}"},
                    )
                    for k in range(32)
                )
            )
            answer["status"] = 500
            other = signed(key)
            failed = await c.post("/v1/fleet/pull-messages", content=ask, headers=other)
            answer["status"] = 200
            retried = await c.post("/v1/fleet/pull-messages", content=ask, headers=other)
            return [r.status_code for r in got], failed.status_code, retried.status_code

    codes, failed, retried = asyncio.run(main())
    assert sorted(codes).count(200) == 1 and codes.count(401) == 31, codes
    assert failed == 503 and retried == 200  # a SuperLink 500 reaches the node as a 503
    assert len(calls) == 3


def test_a_superlink_500_reaches_the_node_as_a_503_it_retries():
    """issue 62: the SuperLink's database locked under load answered 500, on which Flower's
    SuperNode gives up for good (alive, silent); the gateway passes it on as 503, which the
    SuperNode retries, and the retry's signature is fresh or given back."""
    answer = {"status": 500}

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answer["status"], content=b"database is locked")

    app = gateway.build_app(
        "http://superlink", False, signed=True, transport=httpx.MockTransport(upstream)
    )
    ask = PullMessagesRequest(node=Node(node_id=7)).SerializeToString()
    key = ec.generate_private_key(ec.SECP384R1())
    with TestClient(app) as client:
        headers = signed(key)
        r = client.post("/v1/fleet/pull-messages", content=ask, headers=headers)
        assert r.status_code == 503 and "answered 500; retry" in r.text
        assert r.status_code in gateway.RETRIED_BY_NODES
        answer["status"] = 200
        assert (
            client.post("/v1/fleet/pull-messages", content=ask, headers=headers).status_code == 200
        )


def test_the_relay_waits_out_a_locked_superlink_for_the_serverapp_and_gives_up_on_a_dead_one(
    monkeypatch,
):
    """issue 62: a SQLite lock made the SuperLink answer 500 to the ServerApp's calls and
    `stored = false` to its pushed objects; Flower's clients give up on both and the run
    failed. The relay (deploy/superlink.sh runs the SuperExec through it) holds such a call,
    trying again, and answers what the SuperLink finally does, or 503 (retried) while the
    outage lasts; past `outage_s` the SuperLink's own answer; other paths are refused."""
    from flwr.proto.message_pb2 import PushObjectResponse

    answers = []

    def upstream(request: httpx.Request) -> httpx.Response:
        return answers.pop(0) if answers else httpx.Response(200, content=b"ok")

    stored = PushObjectResponse(stored=True).SerializeToString()
    not_stored = PushObjectResponse(stored=False).SerializeToString()
    relay = gateway.build_relay(
        "http://superlink", False, transport=httpx.MockTransport(upstream), hold_s=2.0,
        outage_s=60.0,
    )  # fmt: skip
    with TestClient(relay) as client:
        answers[:] = [httpx.Response(500), httpx.Response(500)]
        r = client.post("/v1/runtime/send-task-heartbeat", content=b"beat")
        assert r.status_code == 200 and not answers  # held through two 500s
        answers[:] = [httpx.Response(200, content=not_stored), httpx.Response(200, content=stored)]
        r = client.post("/v1/runtime/push-object", content=b"obj")
        assert r.status_code == 200 and PushObjectResponse.FromString(r.content).stored
        answers[:] = [httpx.Response(500)] * 10  # longer than the hold: 503, which Flower retries
        r = client.post("/v1/runtime/pull-messages", content=b"p")
        assert r.status_code == 503
        answers[:] = [httpx.Response(404, content=b"no such run")]
        assert client.post("/v1/runtime/pull-task-input", content=b"x").status_code == 404
        for path in (
            "/v1/control/start-run",
            "/v1/fleet/pull-messages",
            "/v1/runtime/../control/x",
        ):
            assert client.post(path, content=b"").status_code == 403
        clock = [0.0]
        monkeypatch.setattr(gateway.time, "monotonic", lambda: clock[0])
        monkeypatch.setattr(gateway.asyncio, "sleep", _advance(clock))
        answers[:] = [httpx.Response(200, content=not_stored)] * 1000
        first = client.post("/v1/runtime/push-object", content=b"gone")
        assert first.status_code == 503  # the outage may pass: retry
        clock[0] += 120.0  # dead for longer than outage_s: the SuperLink's own answer
        last = client.post("/v1/runtime/push-object", content=b"gone")
        assert last.status_code == 200 and not PushObjectResponse.FromString(last.content).stored


def _advance(clock):
    async def sleep(s):
        clock[0] += s

    return sleep


def test_a_slow_reader_holds_its_slot_only_until_the_responses_deadline():
    """issue 62: the per-address count ended when the handler returned, so callers reading a
    response slowly held every slot. A response now holds its caller's slot until it has been
    sent whole, and a multi-MB response not taken within 10 s + its size at the minimum rate
    is cut, its slot given back."""
    import asyncio

    from starlette.responses import Response as StarletteResponse

    body = b"x" * (3 * 1024 * 1024)  # a model pull
    held = []

    async def main(read_s: float, min_rate: float):
        response = StarletteResponse(body)
        released = []
        drained = gateway.Drained(
            response, lambda: released.append(1), gateway.send_deadline(response, min_rate)
        )

        async def send(message):  # the caller reads each part slowly
            held.append(not released)
            await asyncio.sleep(read_s)

        async def receive():
            return {"type": "http.disconnect"}

        scope = {"type": "http", "method": "POST", "path": "/", "headers": []}
        try:
            await drained(scope, receive, send)
            return "sent", released
        except TimeoutError:
            return "cut", released

    assert gateway.send_deadline(StarletteResponse(body), 1024 * 1024) == pytest.approx(13.0)
    how, released = asyncio.run(main(0.01, 1024 * 1024))  # a reader in time
    assert how == "sent" and released == [1] and all(held)  # counted while it drained
    held.clear()
    how, released = asyncio.run(main(0.3, 1e9))  # deadline 10 s: well within 0.6 s of reads
    assert how == "sent"
    gateway_deadline = 0.2  # a reader slower than its deadline is cut and its slot freed
    response = StarletteResponse(body)
    released = []
    drained = gateway.Drained(response, lambda: released.append(1), gateway_deadline)

    async def slow(message):
        await asyncio.sleep(1.0)

    async def receive():
        return {"type": "http.disconnect"}

    with pytest.raises(TimeoutError):
        asyncio.run(drained({"type": "http", "method": "POST", "path": "/", "headers": []},
                            receive, slow))  # fmt: skip
    assert released == [1]
