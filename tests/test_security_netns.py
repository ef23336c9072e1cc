"""The locked-down deployment (README "Security") across network namespaces, with TLS and
SuperNode authentication: a registered SuperNode on another host joins and trains; a node with
an unregistered key is refused; a host that holds the public CA certificate can neither list
runs, submit a run nor register a key through the SuperLink's network port."""

import json
import os
import subprocess

import pandas as pd
import pytest

from tests.conftest import ROOT
from tests.deployment import Federation, free_port, rounds_done, wait_for, wait_listening

pytestmark = pytest.mark.slow  # engine runs / subprocesses: not in the fast lane

NS = f"fe{os.getpid() % 100000}"
LINK, NODE, EVIL = f"{NS}l", f"{NS}n", f"{NS}e"
LINK_IP, LINK_IP2, NODE_IP, EVIL_IP = "10.231.1.1", "10.231.2.1", "10.231.1.2", "10.231.2.2"


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


def test_only_registered_nodes_join_and_only_the_superlink_host_submits(tmp_path, namespaces):
    certs = tmp_path / "certs"
    subprocess.run(
        [str(ROOT / "deploy/make_certs.sh"), str(certs), "3", f"IP:{LINK_IP}", f"IP:{LINK_IP2}"],
        check=True,
        capture_output=True,
    )
    port, control = free_port(), free_port()
    fed = Federation(tmp_path, prefix=namespaces)
    try:
        fed.start(
            "link",
            [
                str(ROOT / "deploy/superlink.sh"),
                "--tls",
                str(certs),
                "--port",
                str(port),
                "--control-port",
                str(control),
            ],
            where="link",
        )
        wait_listening(LINK_IP, port, prefix=namespaces["node"])
        wait_listening("127.0.0.1", control, prefix=namespaces["link"])
        fed.connect("op", f"127.0.0.1:{control}", str(certs / "ca.crt"))  # the operator
        reg = fed.cli("supernode", "register", str(certs / "supernode_0.pub"), "op", where="link")
        assert reg.returncode == 0, reg.stdout + reg.stderr

        def supernode(name, where, address, key):
            return fed.start(
                name,
                [
                    str(ROOT / "deploy/supernode.sh"),
                    "--superlink",
                    address,
                    "--partition-id",
                    "0",
                    "--num-partitions",
                    "1",
                    "--tls",
                    str(certs / "ca.crt"),
                    "--key",
                    str(certs / key),
                ],
                where=where,
            )

        supernode("sn0", "node", f"{LINK_IP}:{port}", "supernode_0")  # registered
        stranger = supernode("evil-node", "evil", f"{LINK_IP2}:{port}", "supernode_1")
        stranger.wait(timeout=120)  # refused: it exits
        assert stranger.returncode != 0
        assert "Failed to activate" in fed.log("evil-node") or "401" in fed.log("evil-node")

        # the attacker holds ca.crt and reaches the port SuperNodes use
        fed.connect("evil", f"{LINK_IP2}:{port}", str(certs / "ca.crt"))
        for args in (
            ["ls", "evil"],
            ["supernode", "register", str(certs / "supernode_2.pub"), "evil"],
            ["run", str(ROOT), "evil", "--run-config", "num-server-rounds=1"],
        ):
            res = fed.cli(*args, where="evil")
            assert "403" in res.stdout + res.stderr, (args, res.stdout[-500:], res.stderr[-500:])

        # nothing the attacker tried took effect, and the operator's own run works over TLS
        runs = json.loads(fed.cli("ls", "op", "--format", "json", where="link").stdout)["runs"]
        assert runs == []
        nodes = json.loads(
            fed.cli("supernode", "ls", "op", "--format", "json", where="link").stdout
        )["nodes"]
        assert len(nodes) == 1 and nodes[0]["status"] == "online"
        out = tmp_path / "out"
        started = fed.cli(
            "run",
            str(ROOT),
            "op",
            "--format",
            "json",
            "--run-config",
            f'num-server-rounds=1 num-clients=1 out-dir="{out}" '
            "driving.image-size=32 driving.train-per-silo=40 "
            "driving.test-per-silo=16 driving.local-epochs=1",
            where="link",
        )
        run_id = json.loads(started.stdout)["run-id"]
        wait_for(
            lambda: fed.status("op", run_id, where="link").startswith("finished"),
            300,
            what="the operator's run",
        )
        assert fed.status("op", run_id, where="link") == "finished:completed", fed.log("link")
        assert rounds_done(out) == 1
    finally:
        fed.close()


def test_each_node_enforces_its_own_policy_and_keeps_a_log_that_verifies(tmp_path, namespaces):
    """Two registered SuperNodes (TLS + node auth) on another host, each with its operator's
    policy (deploy/supernode.sh --policy): alpha's lets a study lower sigma, beta's demands
    sigma >= 2. A FedRL run asking sigma = 1 is refused by beta only, naming the policy key;
    a CDL run of the reference variant (it sends the sub-network) is refused by beta only and
    goes on with alpha; a FedAvg run goes through; both nodes' audit logs verify, show the
    refusals, and count the bytes the server's clients.csv counts."""
    from clients.audit import read

    certs = tmp_path / "certs"
    subprocess.run(
        [str(ROOT / "deploy/make_certs.sh"), str(certs), "2", f"IP:{LINK_IP}"],
        check=True,
        capture_output=True,
    )
    policies = {}
    for role, text in (
        ("alpha", "[fedrl]\nmin-sigma = 0.1\n[cdl]\nshare-sub-network = true\n"),
        ("beta", "[fedrl]\nmin-sigma = 2.0\n"),  # and, by default, no CDL sub-network out
    ):
        policies[role] = tmp_path / f"{role}.toml"
        policies[role].write_text(f'state-dir = "{tmp_path / role}"\n{text}')
    port, control = free_port(), free_port()
    fed = Federation(tmp_path, prefix=namespaces)
    try:
        fed.start(
            "link",
            [str(ROOT / "deploy/superlink.sh"), "--tls", str(certs), "--port", str(port),
             "--control-port", str(control)],
            where="link",
        )  # fmt: skip
        wait_listening(LINK_IP, port, prefix=namespaces["node"])
        wait_listening("127.0.0.1", control, prefix=namespaces["link"])
        fed.connect("op", f"127.0.0.1:{control}", str(certs / "ca.crt"))
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
            wait_for(
                lambda: fed.status("op", run_id, where="link").startswith("finished"),
                300,
                what=f"run {run_id}",
            )
            return fed.status("op", run_id, where="link")

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
