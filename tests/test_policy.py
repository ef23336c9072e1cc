"""A node's policy file (clients/policy.py): checked like every run-config key, secure when
absent, and read from the node's own machine only."""

import os
import re
import subprocess

import pytest

from clients import policy
from tests.conftest import ROOT


@pytest.mark.parametrize(
    "text, says",
    [
        ("[fedrl]\nmin-sigma = nan\n", "'fedrl.min-sigma' must be finite"),
        ("[fedrl]\nmin-sigma = inf\n", "'fedrl.min-sigma' must be finite"),
        ("[fedrl]\nmin-sigma = -1.0\n", "'fedrl.min-sigma' must be finite and in"),
        ('[fedrl]\nmin-sigma = "2"\n', "'fedrl.min-sigma' must be a number"),
        ("[fedrl]\nallow-no-noise = 1\n", "'fedrl.allow-no-noise' must be true or false"),
        ("[fedvln]\nmin-round-houses = 0\n", "'fedvln.min-round-houses' must be a whole"),
        ("[fedvln]\nmin-round-houses = 2.5\n", "'fedvln.min-round-houses' must be a whole"),
        ("[fedvln]\nmin-round-houses = true\n", "'fedvln.min-round-houses' must be a whole"),
        ("[fedrl]\nmin-sigmaa = 1.0\n", "unknown policy key 'fedrl.min-sigmaa'"),
        ("sigma = 1.0\n", "unknown policy key 'sigma'"),
        ('methods = ["fedavg", "nope"]\n', "'methods' must be a non-empty list"),
        ("fedrl = 3\n", "'fedrl' must be a table"),
        ("[fedrl\n", "not a readable TOML policy"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_file_and_key(tmp_path, text, says):
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(policy.PolicyError, match=says) as e:
        policy.load(path)
    assert str(path) in str(e.value)


def test_no_policy_is_the_papers_protection_and_the_run_cannot_supply_one(monkeypatch, tmp_path):
    monkeypatch.delenv(policy.ENV, raising=False)
    p = policy.of_node({"partition-id": 0})
    assert (p.fedrl.min_sigma, p.fedrl.allow_no_noise, p.fedrl.max_clip) == (1.0, False, 0.0)
    assert p.fedvln.preexplore_share == "lang_encoder." and not p.cdl.share_sub_network
    assert p.fedvln.min_round_houses == 2 and not p.fedvln.allow_chain
    assert p.state_root() == tmp_path / "node-state" / "fedembodied"  # $XDG_STATE_HOME
    # the node's own: node config (deployment) first, then its process's environment
    mine = tmp_path / "mine.toml"
    mine.write_text('state-dir = "/srv/fe"\n[fedrl]\nmin-sigma = 3.0\n')
    monkeypatch.setenv(policy.ENV, str(mine))
    assert policy.of_node({}).fedrl.min_sigma == 3.0
    other = tmp_path / "other.toml"
    other.write_text("[fedrl]\nmin-sigma = 5.0\n")
    assert policy.of_node({"policy": str(other)}).fedrl.min_sigma == 5.0
    with pytest.raises(policy.PolicyError, match="policy file not found"):
        policy.of_node({"policy": str(tmp_path / "gone.toml")})


def test_supernode_script_checks_the_policy_before_starting_a_node(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[fedrl]\nmin-sigma = nan\n")
    args = ["--superlink", "127.0.0.1:1", "--partition-id", "0", "--num-partitions", "1"]
    for policy_file, says in ((bad, "min-sigma"), (tmp_path / "none.toml", "no such file")):
        res = subprocess.run(
            [str(ROOT / "deploy/supernode.sh"), *args, "--policy", str(policy_file)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 2 and says in res.stderr, res.stderr


def test_the_launcher_checks_a_policy_and_gives_the_nodes_their_state_dir(tmp_path):
    from simulation import main

    bad = tmp_path / "bad.toml"
    bad.write_text("[cdl]\nshare-sub-network = 2\n")
    assert main(["fedavg", "--policy", str(bad), "--out", str(tmp_path / "o")]) == 2


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda f: f.chmod(0o666), "writable by group and others (mode 0666)"),
        (lambda f: f.chmod(0o620), "writable by group (mode 0620)"),
        (lambda f: os.chown(f, 12345, 0), "owned by uid 12345"),
    ],
)
def test_a_policy_someone_else_can_change_is_refused_at_start_and_at_reread(tmp_path, make, says):
    """As ssh treats its keys: a group/world-writable policy, or one another user owns, is
    refused by the check deploy/supernode.sh runs and by every message's re-read."""
    f = tmp_path / "p.toml"
    f.write_text("[fedrl]\nmin-sigma = 2.0\n")
    f.chmod(0o644)
    assert policy.of_node({"policy": str(f)}).fedrl.min_sigma == 2.0
    if os.getuid() != 0 and "owned" in says:
        pytest.skip("chown to another user needs root")
    make(f)
    with pytest.raises(policy.PolicyError, match=re.escape(f"{f}: policy file is {says}")):
        policy.of_node({"policy": str(f)})
    assert policy.main([str(f)]) == 2


def test_a_policy_behind_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real.toml"
    real.write_text("[fedrl]\nmin-sigma = 2.0\n")
    link = tmp_path / "p.toml"
    link.symlink_to(real)
    with pytest.raises(policy.PolicyError, match="p.toml: policy file is a symlink"):
        policy.of_node({"policy": str(link)})


def test_a_changed_policy_is_seen_by_its_content_even_with_its_old_mtime(tmp_path):
    """A copy that kept the old mtime was not re-read (the cache keyed on mtime); the node
    re-reads the bytes, and the digest the audit log records changes with them."""
    f = tmp_path / "p.toml"
    f.write_text("[fedrl]\nmin-sigma = 2.0\n")
    before = policy.of_node({"policy": str(f)})
    st = f.stat()
    f.write_text("[fedrl]\nmin-sigma = 3.0\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = policy.of_node({"policy": str(f)})
    assert (before.fedrl.min_sigma, after.fedrl.min_sigma) == (2.0, 3.0)
    assert before.digest != after.digest and len(after.digest) == 64
