"""Between the edge and Flower's SuperLink: serve only the Fleet API, and let no node speak for
another.

Why a gateway at all: Flower 1.41 serves its Fleet, Control (run submission, `flwr supernode
register`, `flwr ls`) and ServerAppIo APIs on one port, and its only Control-API authentication
(OIDC accounts) is in the enterprise edition. deploy/superlink.sh binds the SuperLink to
127.0.0.1; HAProxy (deploy/edge.haproxy.cfg) holds the public address with the connection, rate
and size limits; this process sits between them on loopback and forwards `POST /v1/fleet/<name>`
byte for byte (the node-authentication headers included, so the SuperLink still checks every
node's signature) after three checks Flower 1.41 does not make:

1. *Who sends a reply.* Flower's push checks that a reply's `src_node_id` is the destination of
   the message it answers, not that it is the node that signed the call
   (flwr/superlink/routers/fleet/node_auth.py checks only `request.node`); so a registered node
   could post another node's training result. Here every message in a push must carry the
   pushing node's id. The SuperLink then checks that the key signed for that id.
2. *Which objects a node may fetch or upload.* Flower's object pull checks only the run. Here a
   node pulls only objects of the message trees the SuperLink delivered to it, and pushes only
   objects of the trees it announced in its own push.
3. *Bulk from nobody.* With node authentication, a call must carry a fresh timestamp signed by
   the key it names (checked before the body is read), and a key the SuperLink has not yet
   accepted may send at most `--unknown-key-body` bytes; with `--database` (the SuperLink's
   state, deploy/superlink.sh passes it) a key the SuperLink has not registered is refused
   before a byte of its body is read. Every body must arrive within a deadline from its first
   byte. The edge bounds every body by `--max-body` too and buffers it before this process
   sees it (`option http-buffer-request`).
4. *A signature acts once.* A signature covers only the timestamp, so every valid signature of
   one (key, timestamp) is the same permission: the guard is keyed on the decoded key and the
   signed timestamp, never on the header's text (an ECDSA signature (r, s) is also valid as
   (r, n - s), and base64 has unused trailing bits that Python's decoder ignores: issue 62
   replayed both). It is reserved before the call is forwarded (so concurrent copies find it
   taken) and given back only if the call did not reach the SuperLink or it answered 5xx. A
   timestamp is accepted for 30 s, not Flower's 305 s.
5. *A SuperLink error is retried.* The SuperLink answers 500 when its database is locked
   under load; Flower's SuperNode retries only 502/503/504 and gives up on the rest, staying
   alive and silent. The gateway passes any other 5xx on as 503.

    python deploy/fleet_gateway.py --listen /run/fedembodied/gateway.sock --upstream 127.0.0.1:9093 \
        [--tls CERT_DIR]   (ca.crt: the SuperLink speaks TLS and nodes must sign every call)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import datetime
import hashlib
import logging
import re
import sqlite3
import sys
import time
from collections import Counter, OrderedDict
from pathlib import Path

import httpx
import uvicorn
from flwr.proto.fleet_pb2 import (  # pylint: disable=E0611
    PullMessagesRequest,
    PullMessagesResponse,
    PushMessagesRequest,
)
from flwr.proto.message_pb2 import (  # pylint: disable=E0611
    ConfirmMessageReceivedRequest,
    ObjectTree,
    PullObjectRequest,
    PushObjectRequest,
    PushObjectResponse,
)
from flwr.supercore.primitives.asymmetric import bytes_to_public_key, verify_signature
from google.protobuf.message import DecodeError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

# One path segment of lower-case words: no dot segments or escapes that a client or httpx
# could normalise into /v1/control/... on the way upstream.
FLEET_PATH = re.compile(r"/v1/fleet/[a-z][a-z-]*")
HOP_BY_HOP = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
}
# Accepted age of a signed timestamp. Flower's SuperLink allows 305 s (flwr/common/constant.py:
# TIMESTAMP_TOLERANCE = 300 + SYSTEM_TIME_TOLERANCE = 5), which let a captured request act for
# its node for five minutes. A SuperNode signs each call just before sending it
# (flwr/supernode/node_auth_http_interceptor.py), so a head arrives within the clock skew
# between the hosts plus a network delay: 30 s either way is ample with NTP.
SIGNED_AGE_S = (-30.0, 30.0)
MIB = 1 << 20
log = logging.getLogger("fleet-gateway")


class Refused(Exception):
    """A call the gateway does not forward: `status` and a reason for the log and the caller."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


class Bounded(OrderedDict):
    """A set that forgets its oldest entries beyond `cap` (a gateway must not grow forever)."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap = cap

    def add(self, key) -> None:
        self[key] = None
        self.move_to_end(key)
        while len(self) > self.cap:
            self.popitem(last=False)


class SeenSignatures:
    """Signed (key, timestamp) pairs already acted on, remembered for as long as their timestamp
    is accepted: a captured request replayed within the window is refused (issue 42: 46 replays
    from another host were all answered, one pulled its node's `evaluate` message). `reserve`
    takes a pair before its call is forwarded (the check and the reservation run without an
    await between them, so copies arriving at once find it taken); `release` gives it back when
    the call did not act (refused before forwarding, SuperLink unreachable or 5xx), so an honest
    retry goes through. Past `cap` entries the oldest go first."""

    def __init__(self, window_s: float = SIGNED_AGE_S[1] - SIGNED_AGE_S[0], cap: int = 1_000_000):
        self.window_s, self.cap, self.until = window_s, cap, OrderedDict()

    def _expire(self, now: float) -> None:
        while self.until and (next(iter(self.until.values())) < now or len(self.until) > self.cap):
            self.until.popitem(last=False)

    def reserve(self, pair: tuple, now: float) -> bool:
        """Take `pair`; False if it is already taken (a replay)."""
        self._expire(now)
        if pair in self.until:
            return False
        self.until[pair] = now + self.window_s
        return True

    def release(self, pair: tuple) -> None:
        self.until.pop(pair, None)


class Registry:
    """Is a public key registered with the SuperLink (`flwr supernode register`)? Read from the
    SuperLink's own database (its `node` table, read-only), so a call from a key nobody
    registered is refused before any of its body is read, however slowly it would send it.
    Answers are kept 10 s (a newly registered node waits at most that long)."""

    def __init__(self, database: str, ttl_s: float = 10.0):
        self.database, self.ttl_s, self.cache = database, ttl_s, {}

    def __call__(self, public_key: bytes, now: float) -> bool:
        hit = self.cache.get(public_key)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            with contextlib.closing(
                sqlite3.connect(f"file:{self.database}?mode=ro", uri=True, timeout=2.0)
            ) as db:
                row = db.execute(
                    "SELECT 1 FROM node WHERE public_key = ? AND status != 'unregistered'",
                    (public_key,),
                ).fetchone()
        except sqlite3.Error as e:
            log.error("cannot read the SuperLink's node registry %s: %s", self.database, e)
            return False
        if len(self.cache) > 100_000:
            self.cache.clear()
        self.cache[public_key] = (row is not None, now + self.ttl_s)
        return row is not None


def tree_ids(tree: ObjectTree) -> list[str]:
    """Every object id of a message's object tree (root first)."""
    ids, stack = [], [tree]
    while stack:
        node = stack.pop()
        ids.append(node.object_id)
        stack.extend(node.children)
    return ids


class Ledger:
    """What each node may pull (objects of messages delivered to it) and push (objects of its
    own replies), learnt from the calls that pass through; bounded per node."""

    def __init__(self, cap_per_node: int = 200_000):
        self.cap = cap_per_node
        self.pullable: dict[int, Bounded] = {}
        self.pushable: dict[int, Bounded] = {}

    def _set(self, table: dict[int, Bounded], node: int) -> Bounded:
        return table.setdefault(node, Bounded(self.cap))

    def delivered(self, node: int, trees) -> None:
        for tree in trees:
            for oid in tree_ids(tree):
                self._set(self.pullable, node).add(oid)

    def announced(self, node: int, trees) -> None:
        for tree in trees:
            for oid in tree_ids(tree):
                self._set(self.pushable, node).add(oid)

    def may_pull(self, node: int, oid: str) -> bool:
        return oid in self.pullable.get(node, ())

    def may_push(self, node: int, oid: str) -> bool:
        return oid in self.pushable.get(node, ())


def check_request(path: str, body: bytes, ledger: Ledger) -> None:
    """Refuse a Fleet call whose body speaks for another node or reaches for another node's
    objects. Calls not named here (register, activate, heartbeat, get-run, get-fab,
    pull-messages) carry only the caller's own id, which the SuperLink binds to its key."""
    try:
        if path == "/v1/fleet/push-messages":
            req = PushMessagesRequest.FromString(body)
            for msg in req.messages_list:
                if msg.metadata.src_node_id != req.node.node_id:
                    raise Refused(
                        403,
                        f"node {req.node.node_id} pushed a reply as node "
                        f"{msg.metadata.src_node_id}",
                    )
            ledger.announced(req.node.node_id, req.message_object_trees)
        elif path == "/v1/fleet/push-object":
            req = PushObjectRequest.FromString(body)
            if not ledger.may_push(req.node.node_id, req.object_id):
                raise Refused(
                    403, f"node {req.node.node_id} pushed object {req.object_id[:16]}… "
                    "that is in none of its replies",
                )  # fmt: skip
        elif path in ("/v1/fleet/pull-object", "/v1/fleet/confirm-message-received"):
            cls = (
                PullObjectRequest if path.endswith("pull-object") else ConfirmMessageReceivedRequest
            )
            req = cls.FromString(body)
            oid = req.object_id if cls is PullObjectRequest else req.message_object_id
            if not ledger.may_pull(req.node.node_id, oid):
                raise Refused(
                    403, f"node {req.node.node_id} asked for object {oid[:16]}… "
                    "of a message not delivered to it",
                )  # fmt: skip
    except DecodeError as e:
        raise Refused(400, f"{path}: body is not the protobuf this call takes ({e})") from e


def check_signature(headers, now: datetime.datetime) -> str:
    """The caller's public key (base64) if it signed a fresh timestamp with it, else Refused.
    Flower's SuperLink checks the same again and also that the key is registered.
    `signed_pair(headers)` is what the signature grants, for the once-only guard."""
    try:
        key = headers["flwr-public-key"]
        signature = base64.b64decode(headers["flwr-signature"], validate=True)
        stamp = headers["flwr-timestamp"]
        age = (now - datetime.datetime.fromisoformat(stamp)).total_seconds()
        if not SIGNED_AGE_S[0] < age < SIGNED_AGE_S[1]:
            raise ValueError(f"timestamp {stamp} outside Flower's window")
        public = bytes_to_public_key(base64.b64decode(key, validate=True))
        if not verify_signature(public, stamp.encode("ascii"), signature):
            raise ValueError("signature does not verify")
    except (KeyError, ValueError, TypeError, UnicodeError, binascii.Error) as e:
        raise Refused(401, f"unsigned or badly signed call ({e})") from e
    return key


# the statuses Flower 1.41's SuperNode retries (flwr/supercore/retry/http_retry.py); any other
# 5xx from the SuperLink is passed on as 503, so the node retries it too
RETRIED_BY_NODES = frozenset({502, 503, 504})


def signed_pair(headers) -> tuple[bytes, str]:
    """What a checked signature grants: (the key's bytes, the timestamp text it signed). The
    same pair however the key or the signature is spelled (check_signature ran first)."""
    return base64.b64decode(headers["flwr-public-key"], validate=True), headers["flwr-timestamp"]


async def read_body(request: Request, limit: int, min_rate: float = 256 * 1024) -> bytes:
    """The body, refused (413) as soon as it announces or sends more than `limit` bytes, and
    (408) if it is not all there within 10 s + its size at `min_rate` bytes/s from its first
    byte: a body trickled one byte every 5 s held a gateway slot forever (issue 42)."""
    try:
        announced = int(request.headers.get("content-length", "0"))
    except ValueError as e:
        raise Refused(400, "Content-Length is not a number") from e
    if announced > limit:
        raise Refused(413, f"body of {announced} bytes, over this caller's {limit}")
    chunks, size = [], 0

    async def receive():
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise Refused(413, f"body over this caller's {limit} bytes")
            chunks.append(chunk)

    deadline = 10.0 + announced / min_rate
    try:
        await asyncio.wait_for(receive(), deadline)
    except TimeoutError:
        raise Refused(408, f"body not received within {deadline:.0f} s") from None
    return b"".join(chunks)


def send_deadline(response: Response, min_rate: float) -> float:
    """Seconds a response may take to reach its caller: 10 s + its size at `min_rate` bytes/s,
    the rule a request body gets (`read_body`)."""
    return 10.0 + len(getattr(response, "body", b"") or b"") / min_rate


class Drained:
    """A response that holds its caller's slot (the per-address count) until it has been sent
    whole, and is cut at a deadline: the count used to end when the handler returned, so a
    caller reading 1 KiB every 5 s from 5 addresses held all 32 slots for 70 s (issue 62)."""

    def __init__(self, response: Response, release, deadline: float):
        self.response, self.release, self.deadline = response, release, deadline

    async def __call__(self, scope, receive, send) -> None:
        try:
            await asyncio.wait_for(self.response(scope, receive, send), self.deadline)
        except TimeoutError:
            log.warning("a response was not taken within %.0f s; connection cut", self.deadline)
            raise
        finally:
            self.release()


def passed_on(r: httpx.Response) -> Response:
    """The SuperLink's answer as it came, less the hop-by-hop headers (httpx has decoded the
    body, so its content-encoding no longer holds)."""
    keep = {
        k: v for k, v in r.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}
    }
    return Response(r.content, status_code=r.status_code, headers=keep)


def retryable(status: int, path: str, who: str) -> Response | None:
    """A SuperLink error that Flower's clients give up on, as a 503 they retry; None for any
    other status. Under load the SuperLink's SQLite database is locked and it answers 500:
    a SuperNode then gives up for good and stays alive but silent (issue 62: 14 minutes, the
    run went on without the honest nodes), and the SuperLink host's SuperExec and ServerApp
    exit (their retry, flwr/supercore/retry/http_retry.py, also stops at a 500)."""
    if status < 500 or status in RETRIED_BY_NODES:
        return None
    log.warning("upstream answered %d to %s from %s; answered 503 (retry)", status, path[:80], who)
    return PlainTextResponse(f"fedembodied: the SuperLink answered {status}; retry\n", 503)


def unsettled(path: str, r: httpx.Response) -> bool:
    """The SuperLink did not do it, and may if asked again: a 5xx, or a pushed object it
    answered 200 `stored = false` (its SQLite database locked: it logs "Failed to store
    object", and Flower's pusher then raises ObjectPushError, which ended the ServerApp)."""
    if r.status_code >= 500:
        return True
    if r.status_code == 200 and path.endswith("/push-object"):
        with contextlib.suppress(DecodeError):
            return not PushObjectResponse.FromString(r.content).stored
    return False


def build_relay(
    upstream: str,
    verify: str | bool,
    transport: httpx.AsyncBaseTransport | None = None,
    hold_s: float = 25.0,
    outage_s: float = 300.0,
) -> Starlette:
    """The Runtime API relay (`--relay HOST:PORT`, on loopback): the SuperLink host's own
    processes, Flower's SuperExec and the ServerApps it starts, reach the SuperLink through it
    (deploy/superlink.sh), so that a locked database is waited out instead of ending the run.
    A call the SuperLink did not do (`unsettled`) is tried again here every 0.5 s for up to
    `hold_s`, then answered as it came, a 5xx as 503 (`retryable`), which Flower's clients retry. Holding matters for the
    ServerApp's heartbeat: the SuperLink fails a task that has not beaten for 60 s
    (HEARTBEAT_PATIENCE x HEARTBEAT_DEFAULT_INTERVAL, flwr/supercore/corestate/
    sql_corestate.py `_cleanup_expired_task_tokens`), and Flower's own back-off after a few
    failures (up to 20 s) could land the first beat after an outage too late. Only
    `/v1/runtime/` is relayed; it adds no access: the SuperLink's own port is on the same
    loopback. `hold_s` stays under the 30-s timeout of Flower's Runtime API client
    (flwr/supercore/protobuf/client.py). A call still failing after `outage_s` gets the
    SuperLink's own answer: a link dead that long ends the run instead of hanging it."""
    client = httpx.AsyncClient(
        base_url=upstream,
        verify=verify,
        timeout=httpx.Timeout(600.0, connect=10.0),
        transport=transport,
    )
    failing: OrderedDict[bytes, float] = OrderedDict()  # a failing call -> when it first failed

    async def relay(request: Request) -> Response:
        path = request.url.path
        if request.method != "POST" or not path.startswith("/v1/runtime/") or "/../" in path:
            return PlainTextResponse("fedembodied relay: only the Runtime API is relayed\n", 403)
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        deadline = time.monotonic() + hold_s
        while True:
            try:
                r = await client.post(path, content=body, headers=headers)
            except httpx.HTTPError as e:
                log.error("upstream %s unreachable: %s", upstream, e)
                return PlainTextResponse("SuperLink unreachable\n", 502)  # retried by Flower
            if not unsettled(path, r) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)  # held here, so the call lands as soon as the link heals
        call = hashlib.sha256(path.encode() + body).digest()
        if unsettled(path, r):
            if call not in failing:
                failing[call] = time.monotonic()
                while len(failing) > 10_000:  # bounded: forget the oldest
                    failing.popitem(last=False)
            since = failing[call]
            if time.monotonic() - since < outage_s:  # Flower's clients retry a 503
                log.warning("upstream did not do %s (%d) for %.0f s; answered 503 (retry)",
                            path[:80], r.status_code, time.monotonic() - since)  # fmt: skip
                return PlainTextResponse("fedembodied relay: the SuperLink failed; retry\n", 503)
        failing.pop(call, None)  # done, or dead for outage_s: the SuperLink's own answer
        return passed_on(r)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()

    return Starlette(
        routes=[Route("/{path:path}", relay, methods=["GET", "POST"])], lifespan=lifespan
    )


def build_app(
    upstream: str,
    verify: str | bool,
    *,
    signed: bool,
    max_body: int = 64 * MIB,
    unknown_key_body: int = 64 * 1024,
    transport: httpx.AsyncBaseTransport | None = None,
    registered=None,
    min_rate: float = 256 * 1024,
    calls_per_source: int = 8,
) -> Starlette:
    """The gateway as an ASGI app forwarding Fleet calls to `upstream` (http[s]://host:port).
    `signed`: the SuperLink authenticates nodes, so every call must be signed (check 3), once
    (a replayed signature is refused), and with `registered` (a `Registry`) by a key the
    SuperLink has registered, checked before the body is read. At most `calls_per_source`
    calls from one source address (the edge's X-Forwarded-For) are inside at once, a quarter of
    the edge's 32 slots: one address cannot hold what the registered nodes need (a node that
    meets the cap gets 503, which the SuperNode retries)."""
    client = httpx.AsyncClient(
        base_url=upstream,
        verify=verify,
        timeout=httpx.Timeout(600.0, connect=10.0),
        limits=httpx.Limits(max_connections=64),
        transport=transport,
    )
    ledger, accepted_keys, seen = Ledger(), Bounded(100_000), SeenSignatures()
    inside: Counter[str] = Counter()  # calls in progress per source address

    async def forward(request: Request) -> Response:
        # the edge sets X-Forwarded-For to the connection's address (a client's own is dropped)
        who = request.headers.get("x-forwarded-for") or (
            request.client.host if request.client else "?"
        )
        if inside[who] >= calls_per_source:
            log.warning("refused a call from %s: %d calls from it inside already", who, inside[who])
            return PlainTextResponse(
                f"fedembodied fleet gateway: {inside[who]} calls from {who} in progress\n", 503
            )
        inside[who] += 1
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                inside[who] -= 1
                if not inside[who]:
                    del inside[who]

        try:
            response = await _forward(request, who)
        except BaseException:
            release()
            raise
        return Drained(response, release, send_deadline(response, min_rate))

    async def _forward(request: Request, who: str) -> Response:
        path = request.url.path
        pair = None  # the (key, timestamp) this call reserved, if any
        try:
            if request.method != "POST" or not FLEET_PATH.fullmatch(path) or request.url.query:
                raise Refused(
                    403,
                    "only the Fleet API is served here; submit runs on the SuperLink's host",
                )
            key, now = "", time.monotonic()
            if signed:
                key = check_signature(request.headers, datetime.datetime.now(datetime.UTC))
                if registered is not None and not registered(base64.b64decode(key), now):
                    raise Refused(401, "the SuperLink has no node registered with this key")
                if not seen.reserve(signed_pair(request.headers), now):
                    raise Refused(401, "this signature was already used (a replayed request)")
                pair = signed_pair(request.headers)  # reserved: given back if the call fails
            limit = max_body if (not signed or key in accepted_keys) else unknown_key_body
            body = await read_body(request, limit, min_rate)
            check_request(path, body, ledger)
        except Refused as e:
            if pair is not None:
                seen.release(pair)
            log.warning("refused %s %s from %s: %s", request.method, path[:80], who, e)
            return PlainTextResponse(f"fedembodied fleet gateway: {e}\n", e.status)
        except ClientDisconnect:
            if pair is not None:
                seen.release(pair)
            return Response(status_code=400)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            r = await client.post(path, content=body, headers=headers)
        except httpx.HTTPError as e:
            if pair is not None:
                seen.release(pair)
            log.error("upstream %s unreachable: %s", upstream, e)
            return PlainTextResponse("SuperLink unreachable\n", 502)
        if r.status_code >= 500 and pair is not None:
            seen.release(pair)  # the SuperLink did not act on it: an honest retry may
        if (retry := retryable(r.status_code, path, who)) is not None:
            return retry
        if r.status_code == 200:
            if key:
                accepted_keys.add(key)
            if path == "/v1/fleet/pull-messages":
                with contextlib.suppress(DecodeError):
                    node = PullMessagesRequest.FromString(body).node.node_id
                    delivered = PullMessagesResponse.FromString(r.content)
                    ledger.delivered(node, delivered.message_object_trees)
        return passed_on(r)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()

    app = Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)
    app.state.ledger = ledger
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", default="", help="unix socket path the edge forwards to")
    p.add_argument(
        "--relay",
        default="",
        help="HOST:PORT: serve the Runtime API relay there instead (build_relay), for the "
        "SuperLink host's SuperExec",
    )
    p.add_argument("--upstream", required=True, help="HOST:PORT of the loopback SuperLink")
    p.add_argument("--tls", default="", help="folder with ca.crt: the SuperLink's TLS + node auth")
    p.add_argument("--max-body", type=int, default=64 * MIB, help="bytes (default 64 MiB)")
    p.add_argument(
        "--database",
        default="",
        help="the SuperLink's state database: calls from keys it has not registered are "
        "refused before their body is read",
    )
    p.add_argument(
        "--unknown-key-body",
        type=int,
        default=64 * 1024,
        help="bytes a key the SuperLink has not accepted yet may send (default 64 KiB)",
    )
    p.add_argument(
        "--calls-per-source",
        type=int,
        default=8,
        help="calls from one source address inside the gateway at once (default 8); more get 503",
    )
    args = p.parse_args(argv)
    if args.calls_per_source < 1:
        print("fleet_gateway.py: --calls-per-source must be >= 1", file=sys.stderr)
        return 2
    tls = Path(args.tls) if args.tls else None
    if tls and not (tls / "ca.crt").is_file():
        print(f"fleet_gateway.py: --tls {tls}: ca.crt not found", file=sys.stderr)
        return 2
    if bool(args.listen) == bool(args.relay):
        print("fleet_gateway.py: give one of --listen SOCKET or --relay HOST:PORT", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fleet-gateway %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    upstream = f"{'https' if tls else 'http'}://{args.upstream}"
    if args.relay:
        host, _, port = args.relay.rpartition(":")
        if not port.isdigit():
            print(f"fleet_gateway.py: --relay {args.relay!r}: expected HOST:PORT", file=sys.stderr)
            return 2
        relay = build_relay(upstream, str(tls / "ca.crt") if tls else False)
        uvicorn.run(relay, host=host, port=int(port), log_level="warning")
        return 0
    app = build_app(
        upstream,
        str(tls / "ca.crt") if tls else False,
        signed=bool(tls),
        max_body=args.max_body,
        unknown_key_body=args.unknown_key_body,
        registered=Registry(args.database) if args.database and tls else None,
        calls_per_source=args.calls_per_source,
    )
    uvicorn.run(app, uds=args.listen, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
