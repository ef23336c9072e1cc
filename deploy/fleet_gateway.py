"""Serve only Flower's Fleet API (what SuperNodes call) on the network address.

Why: Flower 1.41 serves its Fleet, Control (run submission, `flwr supernode register`,
`flwr ls`) and ServerAppIo APIs on one port. Its only Control-API authentication (OIDC accounts)
is in the enterprise edition: with `FLWR_OIDC_ENABLED=1` the open-source SuperLink exits with
"OIDC account authentication is unavailable in this Flower distribution"
(flwr/superlink/config_loader.py, load_control_authn_plugin). So anyone who can reach that port
can register a node key and submit an app whose ServerApp runs on the SuperLink's host and
whose ClientApp runs on every SuperNode.

deploy/superlink.sh therefore binds Flower's SuperLink to 127.0.0.1 and runs this gateway on
the public address. It forwards `POST /v1/fleet/<name>` byte for byte (the node-authentication
headers included, so the SuperLink still checks every SuperNode's signature) and answers
anything else 403. Run submission and node registration then work only from the SuperLink's
host (or through an SSH tunnel to it).

    python deploy/fleet_gateway.py --listen 0.0.0.0:9092 --upstream 127.0.0.1:9093 \
        [--tls CERT_DIR]   (ca.crt, server.pem, server.key: TLS on both sides)
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
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
log = logging.getLogger("fleet-gateway")


def build_app(upstream: str, verify: str | bool) -> Starlette:
    """The gateway as an ASGI app forwarding Fleet calls to `upstream` (http[s]://host:port)."""
    client = httpx.AsyncClient(
        base_url=upstream, verify=verify, timeout=httpx.Timeout(600.0, connect=10.0)
    )

    async def forward(request: Request) -> Response:
        path = request.url.path
        if request.method != "POST" or not FLEET_PATH.fullmatch(path) or request.url.query:
            who = request.client.host if request.client else "?"
            log.warning("refused %s %s from %s", request.method, path[:80], who)
            return PlainTextResponse(
                "fedembodied fleet gateway: only the Fleet API is served "
                "here; submit runs on the SuperLink's host\n",
                403,
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            r = await client.post(path, content=await request.body(), headers=headers)
        except httpx.HTTPError as e:
            log.error("upstream %s unreachable: %s", upstream, e)
            return PlainTextResponse("SuperLink unreachable\n", 502)
        keep = {
            k: v for k, v in r.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}
        }
        return Response(r.content, status_code=r.status_code, headers=keep)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()

    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT SuperNodes connect to")
    p.add_argument("--upstream", required=True, help="HOST:PORT of the loopback SuperLink")
    p.add_argument("--tls", default="", help="folder with ca.crt, server.pem, server.key")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    tls = Path(args.tls) if args.tls else None
    if tls:
        for f in ("ca.crt", "server.pem", "server.key"):
            if not (tls / f).is_file():
                print(f"fleet_gateway.py: --tls {tls}: {f} not found", file=sys.stderr)
                return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fleet-gateway %(message)s")
    app = build_app(
        f"{'https' if tls else 'http'}://{args.upstream}", str(tls / "ca.crt") if tls else False
    )
    uvicorn.run(
        app,
        host=host,
        port=int(port),
        log_level="warning",
        ssl_certfile=str(tls / "server.pem") if tls else None,
        ssl_keyfile=str(tls / "server.key") if tls else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
