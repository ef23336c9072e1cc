"""A node's privacy policy: set by its operator on its own machine, never by the run.

Why: whoever submits a run sets the run config, and a deployed party must not release more
because a run asks (issue 28: a run with `fedrl.sigma=0 fedrl.insecure-no-noise=true` made a
party release its Q outputs un-noised; `fedvln.variant=fed-full` made a house share its whole
model in pre-exploration; `out-dir` chose where every node wrote). The party reads its policy
from a TOML file on its own disk and refuses, naming the policy key, any message asking more.

Where the file comes from (the first that is set): the node config `policy` (a deployed
SuperNode: `deploy/supernode.sh --policy FILE`), the environment variable
`FEDEMBODIED_POLICY` of the node's process (the simulation launcher sets it from its own
`--policy`), else none. **Secure by default**: with no file every key has the paper's
protection below, whatever the run asks.

    methods = ["fedrl", "cdl"]      # optional: the methods this node serves (default: all)
    state-dir = "/var/lib/fe"       # where the node keeps its state and its audit log
    [fedrl]
    min-sigma = 1.0                 # least Gaussian noise on a released Q output (paper: 1)
    max-clip = 0.0                  # largest L2 bound C; 0 = the domain's paper value
    allow-no-noise = false          # never release un-noised Q outputs
    allow-reproducible-noise = false  # never draw noise from the run seed (anyone could remove it)
    [fedvln]
    train-share = "*"               # federated agent/speaker training: the model (paper)
    preexplore-share = "lang_encoder."  # pre-exploration: language encoder only (fed-lan)
    allow-chain = false             # refuse a chained speaker round (fedvln.speaker-round =
                                    #   "chain") whose server hands this house's model on to
                                    #   the next house: consent the honest server code asks
                                    #   for; a dishonest server can forward any update anyway
                                    #   (only dp.local-epsilon protects against it);
                                    #   serving a chain takes min-round-houses = 1 too
    min-round-houses = 2            # train only in rounds whose model mixes at least this
                                    #   many houses' updates (the server declares it and
                                    #   holds back a round with fewer): after a one-house
                                    #   round every house learns that house's exact update;
                                    #   3 also refuses two-house rounds, where each house
                                    #   learns the other's (the default stages train 2)
    [cdl]
    share-sub-network = false       # only the backbone leaves a silo (paper Eq. 3-5)
    [dp]                            # fedavg, fedprox, cdl-sfl, fedvln (clients/dp.py)
    local-epsilon = 0.0             # > 0: release model updates only under local DP with
                                    #   epsilon <= this per release (0 = not required: the papers')
    max-epsilon = 0.0               # > 0: refuse the release that takes this party's total above

Default `state-dir`: `$XDG_STATE_HOME/fedembodied`, else `~/.local/state/fedembodied`.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from config.methods import METHODS as REGISTRY
from contracts.safe_files import unsafe_folder

ENV = "FEDEMBODIED_POLICY"
LANG_ENCODER = "lang_encoder."  # contracts.fedvln.LANG (clients may not import it from here)
METHODS = tuple(REGISTRY)  # config/methods.py: the only list of methods


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the key."""


class Refused(PermissionError):
    """The run asks more than this node's policy allows; the message names the policy key."""


@dataclass(frozen=True)
class FedRLPolicy:
    min_sigma: float = 1.0
    max_clip: float = 0.0  # 0: the domain's paper value (10 Grid-World, 1000 Text2Action)
    allow_no_noise: bool = False
    allow_reproducible_noise: bool = False


@dataclass(frozen=True)
class FedVLNPolicy:
    train_share: str = "*"
    preexplore_share: str = LANG_ENCODER
    allow_chain: bool = False  # never train in a round that hands this house's model onward
    min_round_houses: int = 2  # never train in a round that sends on a model of fewer houses


@dataclass(frozen=True)
class CDLPolicy:
    share_sub_network: bool = False


@dataclass(frozen=True)
class DPPolicy:
    local_epsilon: float = 0.0  # > 0: local DP required, at most this epsilon per release
    max_epsilon: float = 0.0  # > 0: this party's budget over the run's releases


@dataclass(frozen=True)
class Policy:
    source: str = "built-in secure default"
    digest: str = ""  # SHA-256 of the file's bytes ("" for the built-in default)
    methods: tuple[str, ...] = METHODS
    state_dir: str = ""
    fedrl: FedRLPolicy = field(default_factory=FedRLPolicy)
    fedvln: FedVLNPolicy = field(default_factory=FedVLNPolicy)
    cdl: CDLPolicy = field(default_factory=CDLPolicy)
    dp: DPPolicy = field(default_factory=DPPolicy)

    def state_root(self) -> Path:
        """Where this node keeps its state and audit log; PolicyError if someone else could
        swap files there (contracts/safe_files.unsafe_folder)."""
        if self.state_dir:
            root = Path(self.state_dir)
        else:
            base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
            root = Path(base) / "fedembodied"
        problem = unsafe_folder(root)
        if problem:
            raise PolicyError(
                f"state-dir {root}: {problem} (policy key 'state-dir' in {self.source})"
            )
        return root

    def serves(self, method: str) -> None:
        if method not in self.methods:
            raise Refused(
                f"this node serves {', '.join(self.methods)} only, the run asks method "
                f"{method!r} (policy key 'methods' in {self.source})"
            )

    def refuse(self, key: str, what: str) -> Refused:
        return Refused(f"{what} (policy key {key!r} in {self.source})")


_SECTIONS = {"fedrl": FedRLPolicy, "fedvln": FedVLNPolicy, "cdl": CDLPolicy, "dp": DPPolicy}


def _key(name: str) -> str:
    return name.replace("_", "-")


def _value(path: str, key: str, raw, default):
    """`raw` checked against the type of `default`: finite, non-negative numbers; booleans;
    prefix lists as strings; or PolicyError naming the file and key."""
    where = f"{path}: policy key {key!r}"
    if isinstance(default, bool):
        if not isinstance(raw, bool):
            raise PolicyError(f"{where} must be true or false, got {raw!r}")
        return raw
    if isinstance(default, int):
        if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 10**6:
            raise PolicyError(f"{where} must be a whole number from 1 to 1e6, got {raw!r}")
        return raw
    if isinstance(default, float):
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise PolicyError(f"{where} must be a number, got {raw!r}")
        if not math.isfinite(raw) or not 0 <= raw <= 1e6:
            raise PolicyError(f"{where} must be finite and in [0, 1e6], got {raw!r}")
        return float(raw)
    if not isinstance(raw, str):
        raise PolicyError(f"{where} must be a string, got {raw!r}")
    return raw


def _read_owned(path: str) -> bytes:
    """The policy file's bytes, if it and every folder above it are its operator's alone."""
    folder_problem = unsafe_folder(Path(os.path.abspath(path)).parent)
    if folder_problem:
        raise PolicyError(
            f"{path}: policy file's folder is not its operator's alone: {folder_problem}"
        )
    return _read_owned_file(path)


def _read_owned_file(path: str) -> bytes:
    """The policy file's bytes, if only its operator can change it (as ssh treats its keys):
    not a symlink (whoever can re-point the link chooses the policy), a regular file, owned
    by this node's user or root, not writable by group or others. Checked on the open file,
    so what is checked is what is read. PolicyError names the file and the reason."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise PolicyError(f"{path}: policy file not found") from None
    except OSError as e:
        if os.path.islink(path):
            raise PolicyError(
                f"{path}: policy file is a symlink; name the file itself (a link can be "
                "re-pointed by whoever owns its folder)"
            ) from None
        raise PolicyError(f"{path}: policy file cannot be opened ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise PolicyError(f"{path}: policy file is not a regular file")
        if st.st_uid not in (os.getuid(), 0):
            raise PolicyError(
                f"{path}: policy file is owned by uid {st.st_uid}, not by this node's user "
                f"(uid {os.getuid()}) or root: someone else could loosen it"
            )
        if st.st_mode & 0o022:
            raise PolicyError(
                f"{path}: policy file is writable by {'group' if st.st_mode & 0o020 else ''}"
                f"{' and ' if st.st_mode & 0o020 and st.st_mode & 0o002 else ''}"
                f"{'others' if st.st_mode & 0o002 else ''} (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"chmod go-w {path}"
            )
        return f.read(MAX_POLICY_BYTES + 1)


MAX_POLICY_BYTES = 1 << 20


def load(path: str | Path) -> Policy:
    """The policy in a TOML file, every key checked; PolicyError names the file and the key.
    `digest` is the SHA-256 of the bytes read, which the audit log records with each reply."""
    path = str(path)
    data = _read_owned(path)
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{path}: policy file is larger than {MAX_POLICY_BYTES} bytes")
    try:
        raw = tomllib.loads(data.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise PolicyError(f"{path}: not a readable TOML policy ({e})") from None
    top = {"methods", "state-dir", *_SECTIONS}
    for key in raw:
        if key not in top:
            raise PolicyError(f"{path}: unknown policy key {key!r} (known: {', '.join(top)})")
    out: dict = {"source": path, "digest": hashlib.sha256(data).hexdigest()}
    if "methods" in raw:
        methods = raw["methods"]
        if not isinstance(methods, list) or not methods or any(m not in METHODS for m in methods):
            raise PolicyError(
                f"{path}: policy key 'methods' must be a non-empty list of {', '.join(METHODS)}"
                f", got {methods!r}"
            )
        out["methods"] = tuple(methods)
    if "state-dir" in raw:
        out["state_dir"] = _value(path, "state-dir", raw["state-dir"], "")
    for name, cls in _SECTIONS.items():
        section = raw.get(name, {})
        if not isinstance(section, dict):
            raise PolicyError(f"{path}: policy key {name!r} must be a table [{name}]")
        known = {_key(f.name): f for f in fields(cls)}
        values = {}
        for key, v in section.items():
            if key not in known:
                raise PolicyError(
                    f"{path}: unknown policy key '{name}.{key}' (known: {', '.join(known)})"
                )
            f = known[key]
            values[f.name] = _value(path, f"{name}.{key}", v, f.default)
        out[name] = cls(**values)
    return Policy(**out)


def of_node(node_config) -> Policy:
    """This node's policy: node config `policy`, else $FEDEMBODIED_POLICY, else the default.
    Read and checked again at every message (a few hundred bytes): a change is seen by its
    content, not its mtime (a copy that keeps the old mtime was missed), and a file that has
    become writable by others is refused at once."""
    path = str(node_config.get("policy", "") or os.environ.get(ENV, ""))
    return load(path) if path else Policy()


def _dp_line(d: DPPolicy) -> str:
    said = (
        f"only under local DP, epsilon <= {d.local_epsilon:g} per release"
        if d.local_epsilon
        else "as the run asks (no local DP required)"
    )
    return said + (f", at most epsilon {d.max_epsilon:g} in total" if d.max_epsilon else "")


def main(argv=None) -> int:
    """`python -m clients.policy FILE`: check a policy file (deploy/supernode.sh runs it before
    starting a SuperNode) and print what it enforces."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m clients.policy POLICY.toml", file=sys.stderr)
        return 2
    try:
        p = load(args[0])
    except PolicyError as e:
        print(f"policy: {e}", file=sys.stderr)
        return 2
    print(
        f"policy {p.source}: methods {', '.join(p.methods)}; state in {p.state_root()}; "
        f"fedrl sigma >= {p.fedrl.min_sigma:g}, clip <= {p.fedrl.max_clip or 'paper'}, "
        f"un-noised release {'allowed' if p.fedrl.allow_no_noise else 'never'}, noise from "
        f"{'the run seed if asked' if p.fedrl.allow_reproducible_noise else 'its own key only'}"
        f"; fedvln shares "
        f"{p.fedvln.train_share!r} in training, {p.fedvln.preexplore_share!r} in "
        f"pre-exploration, {'and consents' if p.fedvln.allow_chain else 'never consents'} to "
        f"chained rounds and trains only where a model mixes >= {p.fedvln.min_round_houses} "
        f"houses; cdl {'may send' if p.cdl.share_sub_network else 'never sends'} its "
        f"sub-network; weight updates {_dp_line(p.dp)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
