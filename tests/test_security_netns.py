"""The locked-down deployment (docs/security.md) across network namespaces, with TLS and
SuperNode authentication, deployed by deploy/*.sh: each node enforces its own policy; a node
with an unregistered key is refused; a host that holds the public CA certificate can neither
list runs, submit a run nor register a key through the SuperLink's network port; floods, bulk
and forged replies do not stop a run; nodes cut off come back by themselves."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import PYTHON, ROOT
from tests.deployment import (
    NEEDS_EDGE,
    Federation,
    free_port,
    free_ports,
    rounds_done,
    wait_for,
    wait_listening,
)

pytestmark = [pytest.mark.slow, NEEDS_EDGE]  # engine runs, subprocesses, the edge

NS = f"fe{os.getpid() % 100000}"
LINK, NODE, EVIL = f"{NS}l", f"{NS}n", f"{NS}e"
LINK_IP, LINK_IP2, NODE_IP, EVIL_IP = "10.231.1.1", "10.231.2.1", "10.231.1.2", "10.231.2.2"
ROUNDS = 6  # the attacks take about a minute; the run must outlast them


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def namespaces():
    """link <-veth-> node (10.231.1.0/24) and link <-veth-> evil (10.231.2.0/24)."""
    if os.geteuid() != 0 or _ip("netns", "add", LINK).returncode != 0:
        pytest.skip("network namespaces need root and iproute2")
    try:
        for ns in (NODE, EVIL):
            assert _ip("netns", "add", ns).returncode == 0
        for ns in (LINK, NODE, EVIL):
            _ip("-n", ns, "link", "set", "lo", "up")
        for k, (peer, link_ip, peer_ip) in enumerate(
            [(NODE, LINK_IP, NODE_IP), (EVIL, LINK_IP2, EVIL_IP)]
        ):
            a, b = f"{NS}a{k}", f"{NS}b{k}"
            assert _ip("link", "add", a, "type", "veth", "peer", "name", b).returncode == 0
            _ip("link", "set", a, "netns", LINK)
            _ip("link", "set", b, "netns", peer)
            _ip("-n", LINK, "addr", "add", f"{link_ip}/24", "dev", a)
            _ip("-n", peer, "addr", "add", f"{peer_ip}/24", "dev", b)
            _ip("-n", LINK, "link", "set", a, "up")
            _ip("-n", peer, "link", "set", b, "up")
        yield {
            name: ["ip", "netns", "exec", ns]
            for name, ns in (("link", LINK), ("node", NODE), ("evil", EVIL))
        }
    finally:
        for ns in (LINK, NODE, EVIL):
            _ip("netns", "del", ns)


def _tls_link(tmp_path, namespaces, keys: int, fed: Federation) -> tuple[Path, int, int]:
    """deploy/make_certs.sh (`keys` node keys), deploy/superlink.sh --tls on the link host,
    reachable from the nodes' host, and the operator's CLI connection "op" to it."""
    certs = tmp_path / "certs"
    subprocess.run(
        [str(ROOT / "deploy/make_certs.sh"), str(certs), str(keys), f"IP:{LINK_IP}",
         f"IP:{LINK_IP2}"],
        check=True, capture_output=True,
    )  # fmt: skip
    port, control = free_ports(2)
    fed.start(
        "link",
        [str(ROOT / "deploy/superlink.sh"), "--tls", str(certs), "--port", str(port),
         "--control-port", str(control), "--database", str(tmp_path / "state.db")],
        where="link",
    )  # fmt: skip
    wait_listening(LINK_IP, port, prefix=namespaces["node"])
    wait_listening("127.0.0.1", control, prefix=namespaces["link"])
    fed.connect("op", f"127.0.0.1:{control}", str(certs / "ca.crt"))
    return certs, port, control


def test_each_node_enforces_its_own_policy_and_keeps_a_log_that_verifies(tmp_path, namespaces):
    """Two registered SuperNodes (TLS + node auth) on another host, each with its operator's
    policy (deploy/supernode.sh --policy): alpha's lets a study lower sigma, beta's demands
    sigma >= 2. A FedRL run asking sigma = 1 is refused by beta only, naming the policy key;
    a CDL run of the reference variant (it sends the sub-network) is refused by beta only and
    goes on with alpha; a FedAvg run goes through; both nodes' audit logs verify, show the
    refusals, and count the bytes the server's clients.csv counts."""
    from clients.audit import read

    policies = {}
    for role, text in (
        ("alpha", "[fedrl]\nmin-sigma = 0.1\n[cdl]\nshare-sub-network = true\n"),
        ("beta", "[fedrl]\nmin-sigma = 2.0\n"),  # and, by default, no CDL sub-network out
    ):
        policies[role] = tmp_path / f"{role}.toml"
        policies[role].write_text(f'state-dir = "{tmp_path / role}"\n{text}')
    fed = Federation(tmp_path, prefix=namespaces)
    try:
        certs, port, _ = _tls_link(tmp_path, namespaces, 2, fed)
        for k, role in enumerate(("alpha", "beta")):
            reg = fed.cli(
                "supernode", "register", str(certs / f"supernode_{k}.pub"), "op", where="link"
            )
            assert reg.returncode == 0, reg.stdout + reg.stderr
            fed.start(
                role,
                [str(ROOT / "deploy/supernode.sh"), "--superlink", f"{LINK_IP}:{port}",
                 "--partition-id", str(k), "--num-partitions", "2", "--role", role,
                 "--port", str(free_port()), "--tls", str(certs / "ca.crt"),
                 "--key", str(certs / f"supernode_{k}"), "--policy", str(policies[role])],
                where="node",
            )  # fmt: skip

        def run(rc: str, out) -> str:
            started = fed.cli(
                "run", str(ROOT), "op", "--format", "json", "--run-config",
                f'num-clients=2 out-dir="{out}" {rc}', where="link",
            )  # fmt: skip
            run_id = json.loads(started.stdout)["run-id"]
            return fed.wait_finished(
                "op", run_id, 300, what=f"run {run_id}", where="link", progress=fed.progress(out)
            )

        small_rl = (
            'method="fedrl" num-server-rounds=1 fedrl.warmup=8 fedrl.envs=4 fedrl.act-steps=1 '
            "fedrl.updates=1 fedrl.batch-size=4 fedrl.eval-episodes=2 fedrl.max-steps=3 "
            "fedrl.retries=0 fedrl.sigma=1.0"
        )
        assert run(small_rl, tmp_path / "rl") == "finished:failed"
        rows = pd.read_csv(tmp_path / "rl" / "clients.csv")
        assert rows.status.str.contains("Refused.*policy key 'fedrl.min-sigma'").any(), rows
        assert (rows[rows.partition == "alpha"].status == "ok").all() or (
            "alpha" not in set(rows.partition)
        )
        small = (
            "num-server-rounds=1 driving.image-size=32 driving.train-per-silo=40 "
            "driving.test-per-silo=16 driving.local-epochs=1"
        )
        cdl = f'method="cdl" cdl.variant="reference" topology="complete" {small}'
        assert run(cdl, tmp_path / "cdl") == "finished:completed", fed.log("link")
        rows = pd.read_csv(tmp_path / "cdl" / "clients.csv")
        assert rows[rows.partition == 0].status.eq("ok").all()
        assert rows[rows.partition == 1].status.str.contains("cdl.share-sub-network").all()
        assert run(f'method="fedavg" {small}', tmp_path / "avg") == "finished:completed"
        clients = pd.read_csv(tmp_path / "avg" / "clients.csv")
        for k, role in enumerate(("alpha", "beta")):
            log = read(tmp_path / role / "audit" / f"partition-{k}.jsonl")  # verifies the chain
            assert {r["method"] for r in log} == {"fedrl", "cdl", "fedavg"}
            refused = [r for r in log if r["status"] == "refused"]
            assert bool(refused) == (role == "beta")  # beta only: FedRL's sigma, CDL's sub-net
            assert {r["method"] for r in refused} == {"fedrl", "cdl"} or role == "alpha"
            assert all(
                ("fedrl.min-sigma" if r["method"] == "fedrl" else "cdl.share-sub-network")
                in r["reason"]
                for r in refused
            )
            if role == "alpha":  # what alpha's operator let out: the sub-network too
                sent = [a["name"] for r in log if r["method"] == "cdl" for a in r["arrays"]]
                assert any(n.startswith("sub.") for n in sent)
            assert all(r["bytes"] == 0 for r in log if r["method"] == "fedrl" and role == "beta")
            sent = sum(r["bytes"] for r in log if r["method"] == "fedavg" and r["round"] == 1)
            assert sent == int(clients[clients.partition == k].bytes_up.iloc[0])
    finally:
        fed.close()


def edge_default(name: str) -> float:
    """One of the edge's limits as deploy/superlink.sh sets it by default (EDGE_HEADER_TIMEOUT
    in seconds, EDGE_MAXCONN in connections), so the test bounds follow the configuration."""
    text = (ROOT / "deploy" / "superlink.sh").read_text()
    return float(re.search(rf"{name}:-(\d+)", text).group(1))


def _peak_rss_of(pattern: str) -> float:
    """Peak resident memory (MB) of the newest process whose command line matches."""
    from tests.attacks import peak_rss_mb

    pids = subprocess.run(["pgrep", "-nf", pattern], capture_output=True, text=True).stdout
    return peak_rss_mb(int(pids.split()[0]))


def _node_id(log: str) -> int:
    return int(re.findall(r"SuperNode ID: (\d+)", log)[-1])


# the longest test (7 minutes on 2 cores): in the lane CI runs after the suite, so the suite
# keeps to its 15 minutes
@pytest.mark.lane
def test_a_keyless_host_and_a_lying_node_cannot_stop_a_run_and_cut_nodes_come_back(
    tmp_path, namespaces
):
    """Only registered keys join and only the SuperLink's host submits. During a legitimate
    FedAvg run (2 SuperNodes on another host, TLS + node auth, the edge of deploy/superlink.sh),
    a host with no registered key trickles 40 signed bodies from one address and 40 from each
    of 50 addresses, replays a node's captured signed call with another body, opens 3,000 TLS
    connections in a burst and sends a 1 GiB body; a registered node pushes a reply as the
    other node. A registered node's calls are answered all along (latency measured before,
    during and after); every trickled body is answered at its deadline; the replay is refused;
    the run completes with every silo in every round; the edge's, gateway's and SuperLink's
    peak memory stays bounded. Then the nodes' host is cut off for 20 s in the middle of a
    second run: the server waits, the nodes come back by themselves, and the run completes."""
    fed = Federation(tmp_path, prefix=namespaces)
    try:
        certs, port, control = _tls_link(tmp_path, namespaces, 3, fed)
        for k in range(2):
            reg = fed.cli("supernode", "register", str(certs / f"supernode_{k}.pub"), "op",
                          where="link")  # fmt: skip
            assert reg.returncode == 0, reg.stdout + reg.stderr
            fed.start(
                f"sn{k}",
                [str(ROOT / "deploy/supernode.sh"), "--superlink", f"{LINK_IP}:{port}",
                 "--partition-id", str(k), "--num-partitions", "2", "--port", str(free_port()),
                 "--tls", str(certs / "ca.crt"), "--key", str(certs / f"supernode_{k}")],
                where="node",
            )  # fmt: skip
        wait_for(lambda: all("SuperNode ID" in fed.log(f"sn{k}") for k in range(2)), 120,
                 what="both nodes to join")  # fmt: skip
        # an unregistered key is refused (its supervisor tries again later: an operator may
        # register it), and never comes online
        fed.start(
            "stranger",
            [str(ROOT / "deploy/supernode.sh"), "--superlink", f"{LINK_IP2}:{port}",
             "--partition-id", "0", "--num-partitions", "1", "--tls", str(certs / "ca.crt"),
             "--key", str(certs / "supernode_2")],
            where="evil",
        )  # fmt: skip
        wait_for(lambda: "starting it again" in fed.log("stranger"), 120, what="the refusal")
        # the gateway refuses it before the SuperLink sees it (it reads the node registry)
        assert "no node registered with this key" in fed.log("link")
        fed.kill("stranger")
        # a host holding ca.crt that reaches the nodes' port can neither list runs, register a
        # key nor submit a run (Flower serves its Control API on the same port)
        fed.connect("evil", f"{LINK_IP2}:{port}", str(certs / "ca.crt"))
        for args in (
            ["ls", "evil"],
            ["supernode", "register", str(certs / "supernode_2.pub"), "evil"],
            ["run", str(ROOT), "evil", "--run-config", "num-server-rounds=1"],
        ):
            res = fed.cli(*args, where="evil")
            assert "403" in res.stdout + res.stderr, (args, res.stdout[-500:], res.stderr[-500:])
        nodes = json.loads(
            fed.cli("supernode", "ls", "op", "--format", "json", where="link").stdout
        )["nodes"]
        assert (
            len(nodes) == 2
            and json.loads(fed.cli("ls", "op", "--format", "json", where="link").stdout)["runs"]
            == []
        )

        def start_run(rounds: int, out) -> int:
            started = fed.cli(
                "run", str(ROOT), "op", "--format", "json", "--run-config",
                f'num-server-rounds={rounds} num-clients=2 out-dir="{out}" driving.image-size=32 '
                "driving.train-per-silo=40 driving.test-per-silo=16 driving.local-epochs=1",
                where="link",
            )  # fmt: skip
            return json.loads(started.stdout)["run-id"]

        def finished(run_id: int, out) -> str:
            """400 s without a round or a reply fails; a slow run under attack goes on."""
            return fed.wait_finished(
                "op", run_id, 400, what=f"run {run_id}", where="link", progress=fed.progress(out)
            )

        out = tmp_path / "out"
        run_id = start_run(ROUNDS, out)
        wait_for(lambda: rounds_done(out) >= 1, 300, what="round 1", progress=fed.progress(out))
        # the attacks, from the keyless host, while the run goes on
        attack = [str(PYTHON), "-c", "import json,sys; from tests import attacks as a; "
                  "print(json.dumps(getattr(a, sys.argv[1])(sys.argv[2], int(sys.argv[3]), "
                  "sys.argv[4], *sys.argv[5:])))"]  # fmt: skip

        def from_evil(what: str, *args) -> dict:
            res = subprocess.run(
                [*namespaces["evil"], *attack, what, LINK_IP2, str(port), str(certs / "ca.crt"),
                 *map(str, args)],
                cwd=ROOT, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr[-2000:]
            return json.loads(res.stdout)

        ids = [_node_id((tmp_path / f"sn{k}.log").read_text()) for k in range(2)]
        node1 = [LINK_IP, str(port), str(certs / "ca.crt"), str(certs / "supernode_1")]

        def from_node(code: str, *args) -> str:
            res = subprocess.run(
                [*namespaces["node"], str(PYTHON), "-c",
                 f"import json, sys; from tests import attacks as a; {code}", *node1, *args],
                cwd=ROOT, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr[-2000:]
            return res.stdout

        def probing(seconds: float) -> subprocess.Popen:
            """A registered node's get-run every second: what an honest node meets."""
            return subprocess.Popen(
                [*namespaces["node"], str(PYTHON), "-c",
                 "import json, sys; from tests import attacks as a; print(json.dumps(a.probe("
                 "sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), "
                 "int(sys.argv[6]), float(sys.argv[7]))))",
                 *node1, str(ids[1]), str(run_id), str(seconds)],
                cwd=ROOT, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip

        def probed(proc: subprocess.Popen) -> dict:
            return json.loads(proc.communicate(timeout=300)[0])

        latency = {"before": probed(probing(5))}
        # 40 slow bodies (one byte every 5 s after a signed head) from one address, then 40
        # from each of 50 addresses: the edge holds each body and answers 408 at its deadline
        probe = probing(25)
        slow = {"one address": from_evil("slow_bodies", 40, EVIL_IP)}
        latency["40 from one address"] = probed(probe)
        many = [f"10.231.2.{10 + k}" for k in range(50)]
        for a in many:
            _ip("-n", EVIL, "addr", "add", f"{a}/24", "dev", f"{NS}b1")
        probe = probing(25)
        slow["50 addresses"] = from_evil("slow_bodies", 40 * len(many), ",".join(many))
        latency["40 from each of 50 addresses"] = probed(probe)
        latency["after"] = probed(probing(5))
        # a node's signed call captured on its host and replayed from the keyless host with
        # another body: the signature has been used, so the gateway refuses it
        captured = from_node(
            "h = a.signed_headers(sys.argv[4]); r = a.post(*sys.argv[1:3], sys.argv[3], "
            "'/v1/fleet/get-run', a.get_run(int(sys.argv[5]), int(sys.argv[6])), h); "
            "print(json.dumps({'status': r.status_code, 'headers': h}))",
            str(ids[1]), str(run_id),
        )  # fmt: skip
        captured = json.loads(captured)
        replayed = subprocess.run(
            [*namespaces["evil"], str(PYTHON), "-c",
             "import json, sys; from tests import attacks as a; from flwr.proto.fleet_pb2 import "
             "PullMessagesRequest; from flwr.proto.node_pb2 import Node; r = a.post(sys.argv[1], "
             "int(sys.argv[2]), sys.argv[3], '/v1/fleet/pull-messages', PullMessagesRequest("
             "node=Node(node_id=int(sys.argv[4]))).SerializeToString(), json.loads(sys.argv[5])); "
             "print(r.status_code, r.text)",
             LINK_IP2, str(port), str(certs / "ca.crt"), str(ids[1]),
             json.dumps(captured["headers"])],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        body = from_evil("bulk")  # last from this address: after the burst the edge refuses it
        burst = from_evil("flood")
        # node 1 (registered, its own valid key) pushes a reply as node 0
        forged = from_node(
            "r = a.signed_post(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], "
            "'/v1/fleet/push-messages', a.forged_reply(int(sys.argv[5]), int(sys.argv[6]))); "
            "print(r.status_code, r.text)",
            str(ids[1]), str(ids[0]),
        )  # fmt: skip
        still_running = fed.status("op", run_id, where="link")
        assert finished(run_id, out) == "finished:completed", fed.log("link")
        rss = {
            name: _peak_rss_of(pattern)
            for name, pattern in (
                ("edge", "haproxy -db -f"),
                ("gateway", f"fleet_gateway.py.*{control}"),
                ("superlink", f"flower-superlink.*{tmp_path / 'state.db'}"),
            )
        }
        print(json.dumps({"slow bodies": slow, "probe latency": latency, "captured":
                          captured["status"], "replayed": replayed, "burst": burst, "body": body,
                          "forged": forged, "peak rss MB": rss}, indent=1))  # fmt: skip
        assert still_running.startswith("running"), still_running  # the attacks hit a live run
        # every trickled body is answered (408) or dropped at the edge's request deadline,
        # counted from its TLS handshake; the wait before the handshake is the edge's
        # admission (EDGE_TLS_PER_S a second: 2,000 connections queue 10 s and more on a
        # loaded host, measured 21-25 s), bounded by the client's own 30 s connect timeout
        deadline = edge_default("EDGE_HEADER_TIMEOUT")
        for name, got in slow.items():
            # the whole record in the message: pytest cuts a dict short, and CI keeps no more
            # (stop 82: 164 of 2,000 still open at 60 s, once in CI; the other fields lost)
            assert got.get("still open", 0) == 0, json.dumps({name: got, "latency": latency})
            assert got["max_after_tls_s"] < 2 * deadline, json.dumps({name: got})  # 10.0-14.5
        # the honest node is served all along. During a wave its *new* TLS connection waits in
        # the same handshake queue as the attackers' (FIFO, nothing before TLS tells them
        # apart), so it may wait as long as they do but never longer: its worst request is
        # bounded by the attackers' worst handshake wait in that wave plus one request's time
        # (measured: 8.5-31.4 s during the 50-address wave, the attackers' queue 21-27 s on a
        # loaded host), and by 30 s outside a wave
        queue = {"40 from one address": slow["one address"]["max_tls_s"],
                 "40 from each of 50 addresses": slow["50 addresses"]["max_tls_s"]}  # fmt: skip
        for name, got in latency.items():
            bound = queue[name] + deadline if name in queue else 30
            assert set(got["statuses"]) == {"200"} and got["max_s"] < bound, (name, got, bound)
        assert captured["status"] == 200
        assert replayed.startswith("401") and "already used" in replayed, replayed
        assert "a replayed request" in (tmp_path / "link.log").read_text()
        assert burst["refused"] >= 2800 and burst["open_after_hold"] == 0, burst
        assert body["status"] in (401, 413) and body["bytes_sent"] <= 64 << 20, body
        assert forged.startswith("403") and f"pushed a reply as node {ids[0]}" in forged, forged
        # the edge's memory is bounded by its connection cap, not by the attack: at most
        # EDGE_MAXCONN connections of ~64 KiB (two 16 KiB buffers and a TLS session) over its
        # 25 MB base (measured 80-108 MB with 2,000 trickling, more of them open on a busy host)
        edge_mb = 25 + edge_default("EDGE_MAXCONN") * 64 / 1024
        assert rss["edge"] < edge_mb and rss["gateway"] < 400 and rss["superlink"] < 1000, rss
        clients = pd.read_csv(out / "clients.csv")
        assert len(clients) == 2 * ROUNDS and (clients.status == "ok").all(), clients
        assert rounds_done(out) == ROUNDS
        for k in range(2):  # nobody needed a restart
            assert "starting it again" not in (tmp_path / f"sn{k}.log").read_text()

        # the nodes' host is cut off from the SuperLink's in the middle of a run, for less
        # than the run's node-return-timeout: the server waits for them and the run completes
        after = tmp_path / "after"
        second = start_run(2, after)
        wait_for(
            lambda: rounds_done(after) >= 1, 300, what="round 1 of the second run",
            progress=fed.progress(after),
        )  # fmt: skip
        assert _ip("-n", NODE, "link", "set", f"{NS}b0", "down").returncode == 0
        time.sleep(float(os.environ.get("FEDEMBODIED_CUT_S", "20")))  # 60 measured by hand
        assert _ip("-n", NODE, "link", "set", f"{NS}b0", "up").returncode == 0
        _ip("-n", NODE, "addr", "replace", f"{NODE_IP}/24", "dev", f"{NS}b0")
        assert finished(second, after) == "finished:completed", fed.log("link")[-3000:]
        assert rounds_done(after) == 2
    finally:
        fed.close()
