"""What a host with no node key can throw at a federation's public address, for the edge tests
(tests/test_security_netns.py) and for measuring by hand:

    python -m tests.attacks flood HOST PORT CA_CERT [N]     TLS connections, partial heads
    python -m tests.attacks bulk HOST PORT CA_CERT [BYTES]  one huge unsigned POST

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


def signed_post(host: str, port: int, ca: str, key_file: str, path: str, body: bytes):
    """POST `body` to `path` signed the way Flower's SuperNode signs (its node-auth headers),
    with the private key in `key_file` (an OpenSSH EC key, as deploy/make_certs.sh writes)."""
    import base64

    import httpx
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    from flwr.supercore.date import now
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes, sign_message

    private = load_ssh_private_key(Path(key_file).read_bytes(), password=None)
    stamp = now().isoformat()
    headers = {
        "content-type": "application/protobuf",
        "flwr-public-key": base64.b64encode(public_key_to_bytes(private.public_key())).decode(),
        "flwr-timestamp": stamp,
        "flwr-signature": base64.b64encode(sign_message(private, stamp.encode())).decode(),
    }
    ctx = _context(ca)
    with httpx.Client(verify=ctx, timeout=30) as client:
        return client.post(f"https://{host}:{port}{path}", content=body, headers=headers)


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


def peak_rss_mb(pid: int) -> float:
    """A process's peak resident memory (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    what, host, port, ca, *rest = sys.argv[1:]
    fn = {"flood": flood, "bulk": bulk}[what]
    print(json.dumps(fn(host, int(port), ca, *map(int, rest))))
