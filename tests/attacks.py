"""What a host with no node key can throw at a federation's public address, for the edge tests
(tests/test_security_netns.py) and for measuring by hand:

    python -m tests.attacks flood HOST PORT CA_CERT [N]     TLS connections, partial heads
    python -m tests.attacks bulk HOST PORT CA_CERT [BYTES]  one huge unsigned POST
    python -m tests.attacks slow_bodies HOST PORT CA_CERT [N] [SOURCES]
                                       N signed heads (a key nobody registered), bodies trickled

Each prints one JSON line of what happened."""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from collections import Counter
from pathlib import Path


def _context(ca: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False  # the attacker aims at an IP the certificate may not name
    return ctx


async def _flood(host: str, port: int, ca: str, n: int, hold_s: float) -> dict:
    """Open `n` TLS connections as fast as the machine allows, send half a request head on
    each and hold them open `hold_s`. Counts: handshake done, refused (reset or closed before
    the handshake ended), timed out."""
    ctx, outcome, held = _context(ca), Counter(), []
    start = time.monotonic()

    async def one() -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx), timeout=20
            )
        except TimeoutError:
            outcome["timed out"] += 1
            return
        except (OSError, ssl.SSLError, EOFError):
            outcome["refused"] += 1
            return
        outcome["handshake done"] += 1
        try:
            writer.write(b"POST /v1/fleet/pull-messages HTTP/1.1\r\nHost: x\r\nContent-Le")
            await writer.drain()
        except OSError:
            pass
        held.append((reader, writer))

    sem = asyncio.Semaphore(500)  # descriptors: at most this many handshakes in flight

    async def paced() -> None:
        async with sem:
            await one()

    await asyncio.gather(*(paced() for _ in range(n)))
    opened_s = time.monotonic() - start
    await asyncio.sleep(hold_s)
    still_open = 0
    for reader, writer in held:
        try:  # the edge closes (or answers 408 to) a head that does not complete in time
            got = await asyncio.wait_for(reader.read(1), timeout=0.01)
            still_open += 0 if got is not None else 1
        except TimeoutError:
            still_open += 1
        except (OSError, ssl.SSLError):
            pass
        writer.close()
    return {**outcome, "n": n, "opened_s": round(opened_s, 1), "open_after_hold": still_open}


async def _bulk(host: str, port: int, ca: str, size: int, chunk: int = 1 << 20) -> dict:
    """POST `size` bytes with no node key; how many went out before the edge answered, and
    the status it answered."""
    try:
        reader, writer = await asyncio.open_connection(host, port, ssl=_context(ca))
    except (OSError, ssl.SSLError) as e:  # refused before the handshake ended
        return {"status": None, "bytes_sent": 0, "size": size, "refused": type(e).__name__}
    head = (
        f"POST /v1/fleet/push-object HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/protobuf\r\nContent-Length: {size}\r\n\r\n"
    )
    writer.write(head.encode())
    sent, status, block = 0, None, b"\0" * chunk
    start = time.monotonic()
    answer = asyncio.ensure_future(reader.readline())
    try:
        while sent < size and not answer.done():
            writer.write(block[: min(chunk, size - sent)])
            await writer.drain()
            sent += min(chunk, size - sent)
        line = await asyncio.wait_for(answer, timeout=30)
        status = int(line.split()[1]) if line.startswith(b"HTTP/") else None
    except (OSError, ssl.SSLError, TimeoutError, IndexError, ValueError):
        if answer.done() and not answer.cancelled() and answer.exception() is None:
            line = answer.result()
            status = int(line.split()[1]) if line.startswith(b"HTTP/") else None
    finally:
        writer.close()
    return {
        "status": status,
        "bytes_sent": sent,
        "size": size,
        "s": round(time.monotonic() - start, 1),
    }


def signed_headers(key_file: str = "") -> dict:
    """The node-auth headers Flower's SuperNode sends, signed now with the private key in
    `key_file` (an OpenSSH EC key, as deploy/make_certs.sh writes) or, with none, with a fresh
    key of the attacker's own that no SuperLink registered."""
    import base64

    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    from flwr.supercore.date import now
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes, sign_message

    private = (
        load_ssh_private_key(Path(key_file).read_bytes(), password=None)
        if key_file
        else ec.generate_private_key(ec.SECP384R1())
    )
    stamp = now().isoformat()
    return {
        "content-type": "application/protobuf",
        "flwr-public-key": base64.b64encode(public_key_to_bytes(private.public_key())).decode(),
        "flwr-timestamp": stamp,
        "flwr-signature": base64.b64encode(sign_message(private, stamp.encode())).decode(),
    }


def post(host: str, port: int, ca: str, path: str, body: bytes, headers: dict):
    """One POST through the edge (TLS, the federation's CA)."""
    import httpx

    with httpx.Client(verify=_context(ca), timeout=30) as client:
        return client.post(f"https://{host}:{port}{path}", content=body, headers=headers)


def signed_post(host: str, port: int, ca: str, key_file: str, path: str, body: bytes):
    """POST `body` to `path` signed the way Flower's SuperNode signs, with `key_file`."""
    return post(host, port, ca, path, body, signed_headers(key_file))


def get_run(node_id: int, run_id: int) -> bytes:
    """A node's harmless call: the run's details (what a SuperNode asks before it starts)."""
    from flwr.proto.node_pb2 import Node
    from flwr.proto.run_pb2 import GetRunRequest

    return GetRunRequest(node=Node(node_id=node_id), run_id=run_id).SerializeToString()


def probe(host: str, port: int, ca: str, key_file: str, node_id: int, run_id: int,
          seconds: float, every_s: float = 1.0) -> dict:  # fmt: skip
    """A registered node's signed get-run, every `every_s` for `seconds`: its latencies (s)
    and statuses, what an honest node meets while an attack runs."""
    took, statuses, end = [], Counter(), time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        try:
            r = signed_post(host, port, ca, key_file, "/v1/fleet/get-run", get_run(node_id, run_id))
            statuses[r.status_code] += 1
        except Exception as e:  # noqa: BLE001 - a timeout or reset is what is measured
            statuses[type(e).__name__] += 1
        took.append(time.monotonic() - start)
        time.sleep(max(0.0, every_s - took[-1]))
    took.sort()
    return {
        "n": len(took),
        "statuses": {str(k): v for k, v in statuses.items()},
        "median_s": round(took[len(took) // 2], 3),
        "max_s": round(took[-1], 3),
    }


async def _slow_bodies(host: str, port: int, ca: str, n: int, sources: list[str],
                       byte_every_s: float, hold_s: float) -> dict:  # fmt: skip
    """`n` TLS connections (spread over the local `sources` addresses), each sending a signed
    head with a key nobody registered (`POST /v1/fleet/get-run`, Content-Length 60000) and then
    one body byte every `byte_every_s`, for at most `hold_s`. Counts the answers and how long
    each connection was held before it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # one descriptor per connection
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 256)), hard))
    ctx, outcome, held_s, tls_s, after_tls_s = _context(ca), Counter(), [], [], []

    async def one(k: int) -> None:
        src = sources[k % len(sources)] if sources else None
        start = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, local_addr=(src, 0) if src else None),
                timeout=30,
            )
        except (OSError, ssl.SSLError, TimeoutError):
            outcome["refused"] += 1
            return
        opened = time.monotonic()  # the TLS handshake is done: the edge's request deadline runs
        tls_s.append(opened - start)
        head = "".join(f"{k}: {v}\r\n" for k, v in signed_headers().items())
        writer.write(
            f"POST /v1/fleet/get-run HTTP/1.1\r\nHost: x\r\n{head}"
            f"Content-Length: 60000\r\n\r\n".encode()
        )
        answer = asyncio.ensure_future(reader.readline())
        try:
            while time.monotonic() - start < hold_s and not answer.done():
                writer.write(b"\0")
                await writer.drain()
                await asyncio.wait({answer}, timeout=byte_every_s)
            line = answer.result() if answer.done() else b""
            outcome[str(int(line.split()[1])) if line.startswith(b"HTTP/") else "closed"] += 1
        except (OSError, ssl.SSLError, IndexError, ValueError):
            outcome["closed"] += 1
        finally:
            if not answer.done():
                answer.cancel()
                outcome["still open"] += 1
            held_s.append(time.monotonic() - start)
            after_tls_s.append(time.monotonic() - opened)
            writer.close()

    await asyncio.gather(*(one(k) for k in range(n)))

    def spread(name: str, xs: list[float]) -> dict:
        xs = sorted(xs)
        return {f"median_{name}": round(xs[len(xs) // 2], 1) if xs else None,
                f"max_{name}": round(xs[-1], 1) if xs else None}  # fmt: skip

    # held: from the first SYN to the answer; tls: queued for the handshake (the edge admits
    # EDGE_TLS_PER_S a second); after_tls: what the edge's request deadline governs
    return {**outcome, "n": n, "sources": max(1, len(sources)), **spread("held_s", held_s),
            **spread("tls_s", tls_s), **spread("after_tls_s", after_tls_s)}  # fmt: skip


def forged_reply(own_id: int, as_id: int) -> bytes:
    """A push of one reply that says it comes from node `as_id`, sent by node `own_id`."""
    from flwr.proto.fleet_pb2 import PushMessagesRequest
    from flwr.proto.message_pb2 import Message, Metadata
    from flwr.proto.node_pb2 import Node

    msg = Message(metadata=Metadata(run_id=1, src_node_id=as_id, dst_node_id=1))
    return PushMessagesRequest(node=Node(node_id=own_id), messages_list=[msg]).SerializeToString()


def flood(host: str, port: int, ca: str, n: int = 3000, hold_s: float = 15) -> dict:
    return asyncio.run(_flood(host, port, ca, n, hold_s))


def bulk(host: str, port: int, ca: str, size: int = 1 << 30) -> dict:
    return asyncio.run(_bulk(host, port, ca, size))


def slow_bodies(host: str, port: int, ca: str, n=40, sources: str = "", byte_every_s=5.0,
                hold_s=60.0) -> dict:  # fmt: skip
    """`sources`: comma-separated local addresses to send from ("" = the default route's).
    Numbers may come as text (a command line's arguments)."""
    sources_list = [a for a in str(sources).split(",") if a]
    return asyncio.run(
        _slow_bodies(host, int(port), ca, int(n), sources_list, float(byte_every_s), float(hold_s))
    )


def peak_rss_mb(pid: int) -> float:
    """A process's peak resident memory (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    what, host, port, ca, *rest = sys.argv[1:]
    if what == "slow_bodies":
        n, sources = (int(rest[0]) if rest else 40), (rest[1] if len(rest) > 1 else "")
        print(json.dumps(slow_bodies(host, int(port), ca, n, sources)))
    else:
        fn = {"flood": flood, "bulk": bulk}[what]
        print(json.dumps(fn(host, int(port), ca, *map(int, rest))))
