"""simulation.py rejects bad input with one line and exit code 2, before starting anything."""

import subprocess

import pytest

from tests.conftest import PYTHON, ROOT

pytestmark = pytest.mark.slow  # engine runs / subprocesses: not in the fast lane


def _run(*args, timeout=60):
    return subprocess.run(
        [PYTHON, str(ROOT / "simulation.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_help_lists_every_method_with_one_line():
    from config.methods import METHODS

    res = _run("--help")
    assert res.returncode == 0
    for name, m in METHODS.items():
        assert f"{name}" in res.stdout and m.description[:30] in res.stdout


# The real process path (exit 2, one line on stderr, nothing written) for a few inputs; the
# full corpus (800+ malformed flags, values and files) runs in-process in test_fuzz_inputs.py.
@pytest.mark.parametrize(
    "args, culprit",
    [
        (["fedsgd"], "unknown method 'fedsgd'"),
        (["fedavg", "--run-config", "driving.lr 0.1"], "'driving.lr' is not key=value"),
        (["fedavg", "--run-config", "round-timeout=0"], "'round-timeout' must be in [0.01,"),
        (["fedvln", "--stage", "preexplore"], "'fedvln.agent-init'"),
        (["fedavg", "--run-config", 'faults.raise-partitions="12"'], "partition 12 does not exist"),
        (["fedrl", "--run-config", "fedrl.sigma=0.0"], "fedrl.insecure-no-noise"),
        (["fedavg", "--timeout", "1e-300"], "bad value for --timeout"),
        (["fedavg", "--run-config", "resume=true resume-round=7"], "resumed with --resume DIR"),
        pytest.param(
            ["fedavg", "--num-gpus", "1"],
            "no CUDA GPU",
            marks=pytest.mark.skipif(
                __import__("torch").cuda.is_available(), reason="this machine has a GPU"
            ),
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(args, culprit, tmp_path):
    res = _run(*args, "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    assert culprit in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # nothing was started or written


def test_a_checkpoint_that_would_run_code_is_refused_before_anything_starts(tmp_path):
    import pickle

    import torch

    flag = tmp_path / "PWNED"

    class Evil:
        def __reduce__(self):
            return (exec, (f"open({str(flag)!r}, 'w').write('x')",))

    bad = tmp_path / "agent.pt"
    torch.save(
        {"kind": "Follower", "size": {}, "state": {}, "x": Evil()}, bad, pickle_module=pickle
    )
    spk = tmp_path / "speaker.pt"
    spk.write_bytes(b"junk")
    res = _run(
        "fedvln",
        "--stage",
        "augment",
        "--out",
        str(tmp_path / "out"),
        "--run-config",
        f'fedvln.agent-init="{bad}" fedvln.speaker-init="{spk}"',
    )
    assert res.returncode == 2 and "fedvln.agent-init:" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not flag.exists() and not (tmp_path / "out").exists()


def test_corrupt_data_file_is_named(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "driving_log.csv").write_text("a.jpg, b.jpg, c.jpg, not-a-number, 0, 0, 1\n")
    res = _run("fedavg", "--run-config", f'driving.data-dir="{data}"')
    assert res.returncode == 2
    assert "driving_log.csv:1: field 'steering'" in res.stderr and "Traceback" not in res.stderr


def test_existing_results_are_not_overwritten(tmp_path):
    (tmp_path / "rounds.csv").write_text("round\n1\n")
    res = _run("fedavg", "--out", str(tmp_path))
    assert res.returncode == 2 and "already holds a run" in res.stderr
    assert (tmp_path / "rounds.csv").read_text() == "round\n1\n"


def test_graph_topology_fixes_the_number_of_silos(tmp_path):
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "topologies" / "gaia.gml").is_file():
        pytest.skip("no shared topologies")
    res = _run("cdl", "--topology", "gaia-ring", "--num-clients", "5", "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "contradicts --topology gaia-ring (11 silos)" in res.stderr


def test_certificate_recipe_always_covers_what_the_superlink_connects_to(tmp_path):
    """The SuperLink's own process reaches it on 127.0.0.1: a SAN list given for the real host
    must not drop it (runs would stay pending)."""
    import shutil

    if not (shutil.which("openssl") and shutil.which("ssh-keygen")):
        pytest.skip("openssl/ssh-keygen not installed")
    subprocess.run(
        ["bash", str(ROOT / "deploy" / "make_certs.sh"), str(tmp_path), "1", "DNS:hostA"],
        check=True,
        capture_output=True,
    )
    text = subprocess.run(
        [
            "openssl",
            "x509",
            "-in",
            str(tmp_path / "server.pem"),
            "-noout",
            "-ext",
            "subjectAltName",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text and "DNS:hostA" in text


def test_resume_refuses_what_it_cannot_continue(tmp_path):
    import json

    res = _run("fedavg", "--resume", str(tmp_path / "none"))
    assert res.returncode == 2 and "no readable config.json" in res.stderr
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps({"method": "gossip"}))
    res = _run("fedavg", "--resume", str(tmp_path / "run"))
    assert res.returncode == 2 and "that run is 'gossip'" in res.stderr
    res = _run("gossip", "--resume", str(tmp_path / "run"), "--seed", "3")
    assert res.returncode == 2 and "--seed cannot change it" in res.stderr
    res = _run("gossip", "--resume", str(tmp_path / "run"))
    assert res.returncode == 2 and "no rounds.csv" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "rounds, config, says",
    [
        ("round\n1\n2.5\n", {}, "column 'round' must be 1, 2, ..., k"),
        ("round\n1\n-3\n", {}, "column 'round' must be 1, 2, ..., k"),
        ("round\n1\n1e18\n", {}, "column 'round' must be 1, 2, ..., k"),
        ("round\n2\n1\n", {}, "column 'round' must be 1, 2, ..., k"),
        ("round\nx\n", {}, "column 'round' must be 1, 2, ..., k"),
        ("nothing\n1\n", {}, "rounds.csv is not readable"),
        ("round\n1\n", {"driving.lr": "fast"}, "config.json: .*driving.lr"),
        ("round\n1\n", {"num-server-rounds": 1}, "all 1 rounds are done"),
    ],
)
def test_resume_trusts_nothing_it_reads_and_takes_the_method_from_the_folder(
    tmp_path, rounds, config, says
):
    """--resume DIR alone: the method is DIR's; the saved config gets a fresh run's checks and
    rounds.csv must count 1..k, all refused in one line before Flower or Ray start."""
    import json
    import re

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps({"method": "gossip", "num-server-rounds": 3, **config})
    )
    (run / "rounds.csv").write_text(rounds)
    res = _run("--resume", str(run))
    assert res.returncode == 2 and re.search(says, res.stderr), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_misspelled_method_gets_a_did_you_mean():
    res = _run("fedvnl")
    assert res.returncode == 2 and "did you mean 'fedvln'?" in res.stderr


def test_a_plain_run_never_joins_a_ray_cluster_left_on_the_machine(monkeypatch):
    """Ray's init() with no address joins the cluster a `ray start` left; the launcher's
    private SuperLink tells Flower's Ray to start its own unless an address is given."""
    from launch import superlink

    started = {}

    class Popen:
        def __init__(self, args, env, **kw):
            started["env"] = env

    monkeypatch.setattr(superlink.subprocess, "Popen", Popen)
    monkeypatch.setattr(superlink.LocalSuperLink, "_wait_ready", lambda self: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    superlink.LocalSuperLink()
    assert started["env"]["RAY_ADDRESS"] == "local"
    superlink.LocalSuperLink("10.0.0.1:6379")
    assert started["env"]["RAY_ADDRESS"] == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    superlink.LocalSuperLink()
    assert started["env"]["RAY_ADDRESS"] == "10.0.0.2:6379"


@pytest.mark.parametrize(
    "run_config, says",
    [
        # the likeliest mistake: a string left unquoted; the fix, quoted for a shell too
        (
            "fedrl.map-file=../x.mat",
            """'fedrl.map-file' is a str: quote it, fedrl.map-file="../x.mat\"""",
        ),
        ("driving.lr=fast", "'driving.lr' is a float"),
        ("fedrl.sigam=2.0", "did you mean 'fedrl.sigma'?"),
        # bounded before allocation (a 30-million-id range took 42 s and 2.5 GB)
        ('faults.rounds="1-30000000"', "'faults.rounds': more than 100000 ids"),
        ('faults.rounds="5-2"', "runs backwards"),
        ("seed=-1", r"must be in \[0, 4294967295\]"),  # integers as integers
        ('fedvln.stage="agnet"', "did you mean 'agent'?"),  # choices too
        ('topology="rnig"', "did you mean 'ring'?"),
        ('topology="gaai-ring"', "gaai.gml not found \\(did you mean 'gaia'\\?\\)"),
    ],
)
def test_a_bad_run_config_says_how_to_fix_it(run_config, says):
    import re

    method = {"fedvln": "fedvln", "topology": "gossip"}.get(run_config.split(".")[0].split("=")[0])
    res = _run(method or "fedavg", "--run-config", run_config)
    assert res.returncode == 2 and re.search(says, res.stderr), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_key_that_needs_a_stage_is_checked_with_the_stage_flag(tmp_path):
    """`--stage speaker --run-config fedvln.speaker-round="chain"` passes the launcher's checks
    (the flag is the key the option needs; it was checked before the flag was merged in);
    without the flag the same run config is refused naming the key, and with the default
    policy, which no house would serve, naming the policy key and the policy that consents."""
    import simulation
    from simulation import BadInput

    def resolve(*argv):
        args = simulation.build_parser().parse_args(["fedvln", "--out", str(tmp_path / "r"), *argv])
        return simulation.resolve(args)[0]

    research = str(ROOT / "deploy" / "policies" / "research.toml")
    got = resolve(
        "--stage", "speaker", "--policy", research, "--run-config", 'fedvln.speaker-round="chain"'
    )  # fmt: skip
    assert got["fedvln.stage"] == "speaker" and got["fedvln.speaker-round"] == "chain"
    with pytest.raises(BadInput, match="fedvln.speaker-round"):
        resolve("--run-config", 'fedvln.speaker-round="chain"')
    # the houses' policy refuses a chain unless it consents: said before anything starts
    with pytest.raises(BadInput, match="refuses it.*allow-chain.*research.toml"):
        resolve("--stage", "speaker", "--run-config", 'fedvln.speaker-round="chain"')
    # and a run whose rounds may send on one house's update (fedvln.min-round-houses)
    one = ("--run-config", "fedvln.min-round-houses=1 fedvln.seen-rate=0.05")
    with pytest.raises(BadInput, match="min-round-houses.*secure default.*research.toml"):
        resolve(*one)
    assert resolve("--policy", research, *one)["fedvln.min-round-houses"] == 1
    with pytest.raises(BadInput, match="trains 1 house.*'fedvln.min-round-houses' = 2"):
        resolve("--run-config", "fedvln.seen-rate=0.05")  # 1 of 12 seen houses a round
    # a chain needs both consents: a handed-on model mixes no other house
    chain_only = tmp_path / "chain-only.toml"
    chain_only.write_text("[fedvln]\nallow-chain = true\n")
    chain_only.chmod(0o600)
    with pytest.raises(BadInput, match="chain.*min-round-houses = 1 as well as allow-chain"):
        resolve("--stage", "speaker", "--policy", str(chain_only),
                "--run-config", 'fedvln.speaker-round="chain"')  # fmt: skip
    # and a run that is not FedVLN is not asked about FedVLN's keys
    strict = tmp_path / "strict.toml"
    strict.write_text("[fedvln]\nmin-round-houses = 3\n")
    strict.chmod(0o600)
    args = simulation.build_parser().parse_args(
        ["fedavg", "--out", str(tmp_path / "d"), "--policy", str(strict)]
    )
    simulation.resolve(args)  # no BadInput
