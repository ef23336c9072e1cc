"""Helpers for experiment scripts: run simulation.py like a user would, resumably, and many
runs at once with a progress bar."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import operator
import os
import shlex
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from config.schema import defaults, parse_overrides
from launch.lifetime import child_env, die_with, wait_stopping

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
# the nodes' policy when a study compares what the papers compare beyond their own protections
RESEARCH_POLICY = ROOT / "deploy" / "policies" / "research.toml"


def simulate(
    method: str,
    run_dir: Path,
    *,
    rounds: int,
    seed: int,
    num_clients: int | None = None,
    topology: str | None = None,
    run_config: str = "",
    policy: Path | None = None,
) -> Path:
    """Run one study into run_dir unless it already finished there with the same launch (so
    scripts resume); a run of the same launch that was interrupted goes on from its last
    finished round (`simulation.py --resume`), one whose `*-init` checkpoint was retrained since is
    trained again, any other unfinished run is refused. Finished:
    all `rounds` done, or stopped by its convergence rule (FedVLN's `fedvln.patience`).
    `study.json` records the launch: the command's arguments, the run config's defaults (a
    changed default of a key the run recorded changes the run; a key added since does not,
    `_pair`) and the policy file's bytes; a finished run of another
    launch is trained again. A data folder named in run_config is keyed by its path, not its
    bytes; a checkpoint a run starts from (`*-init`) by its bytes, so that a retrained earlier
    stage retrains the stages that start from it."""
    done_file = run_dir / "study.json"
    cmd = [
        sys.executable,
        str(ROOT / "simulation.py"),
        method,
        "--rounds",
        str(rounds),
        "--seed",
        str(seed),
        "--out",
        str(run_dir),
        "--no-plots",
    ]
    if num_clients is not None:
        cmd += ["--num-clients", str(num_clients)]
    if topology is not None:
        cmd += ["--topology", topology]
    if run_config:
        cmd += ["--run-config", run_config]
    if policy is not None:
        cmd += ["--policy", str(policy)]
    launch = {"args": cmd[2:], "defaults": defaults(), "policy": path_digest(policy or "")}
    if starts := _starts(run_config):
        launch["starts"] = starts
    if look := _look(method, run_config):
        launch["appearance_look"] = look
    recorded = json.loads(done_file.read_text()) if done_file.is_file() else None
    same = recorded is not None and operator.eq(*_pair(recorded, launch, run_config))
    same = same and not _recipe_changed(run_dir, method, run_config)
    if (run_dir / "rounds.csv").exists():
        raised = _raised_cap(recorded, launch, run_config, run_dir)
        if raised == "converged":
            return run_dir
        if raised == "extend":
            print(f"{run_dir}: ran all its rounds without converging; going on to {rounds}")
            cmd = [*cmd[:3], "--resume", str(run_dir), "--rounds", str(rounds), "--no-plots"]
        elif _finished(run_dir, rounds) or (
            recorded and recorded.get("finished", True) and not same
        ):
            if same:  # finished; study.json may still say unfinished if the study was killed
                done_file.write_text(
                    json.dumps({**launch, "finished": True}, indent=1, default=str)
                )
                return run_dir  # between the run's end and this mark
            print(f"{run_dir}: made by another launch (or before study.json); training again")
            shutil.rmtree(run_dir)
        elif same:  # this launch, interrupted: go on from its last finished round
            cmd = [*cmd[:3], "--resume", str(run_dir), "--rounds", str(rounds), "--no-plots"]
        elif recorded is not None and _only_starts_changed(recorded, launch, run_config):
            print(f"{run_dir}: interrupted, and the checkpoint it starts from was retrained since")
            shutil.rmtree(run_dir)
        else:
            raise SystemExit(f"{run_dir} holds an unfinished run; remove it to rerun")
    extending = "--resume" in cmd and recorded is not None and recorded.get("finished", False)
    run_dir.mkdir(parents=True, exist_ok=True)
    done_file.write_text(json.dumps({**launch, "finished": False}, indent=1, default=str))
    print("$", " ".join(cmd), flush=True)
    try:
        run_child(cmd, check=True)
    except subprocess.CalledProcessError:
        if extending:  # a failed raise of the cap: the finished shorter run still stands (a
            done_file.write_text(json.dumps(recorded, indent=1, default=str))  # rerun with
        raise  # its cap reads it, never deletes it as another launch's)
    done_file.write_text(json.dumps({**launch, "finished": True}, indent=1, default=str))
    return run_dir


def run_child(cmd: list[str], check: bool = False, **popen) -> subprocess.CompletedProcess:
    """A run's own process (simulation.py, the centralized trainer), in the project, that
    stops when this study does, killed or interrupted, after its clean-up (launch/lifetime.py).
    `popen`: more of Popen's arguments (where its output goes; `env` adds to the run's)."""
    env = child_env() | popen.pop("env", {})
    with subprocess.Popen(cmd, cwd=ROOT, env=env, **popen) as proc:
        code = wait_stopping(proc)
    if check and code != 0:
        raise subprocess.CalledProcessError(code, cmd)
    return subprocess.CompletedProcess(cmd, code)


def _raised_cap(recorded, launch: dict, run_config: str, run_dir: Path) -> str:
    """A finished run of this very launch but for a smaller round cap: "converged" if it
    stopped by its convergence rule before that cap (a higher cap gives the same run), "extend"
    if it ran all its rounds (raising the cap goes on from its last round, `simulation.py
    --resume --rounds`, which gives the run the higher cap would have: nothing a round does
    depends on the cap); else ""."""
    if recorded is None or not recorded.get("finished", True):
        return ""
    old, new = _pair(recorded, launch, run_config)
    old_rounds, new_rounds = _rounds_arg(old["args"]), _rounds_arg(new["args"])
    if old_rounds is None or new_rounds is None or new_rounds <= old_rounds:
        return ""
    strip = lambda u: {**u, "args": _without_rounds(u["args"])}  # noqa: E731
    if strip(old) != strip(new) or _recipe_changed(run_dir, launch["args"][0], run_config):
        return ""
    if int(pd.read_csv(run_dir / "rounds.csv")["round"].max()) >= old_rounds:
        # the last round is always evaluated: only a cap on the evaluation schedule adds no
        # evaluation (and no best checkpoint or patience count) that the longer run lacks
        period = _eval_period(run_dir)
        return "extend" if period and old_rounds % period == 0 else ""
    return "converged" if _finished(run_dir, old_rounds) else ""


def _only_starts_changed(recorded: dict, launch: dict, run_config: str) -> bool:
    """The same launch but for the checkpoints it starts from (`*-init`): an earlier stage was
    trained again, so what this run had done is stale whatever it was."""
    old, new = _pair(recorded, launch, run_config)
    return old["starts"] != new["starts"] and {**old, "starts": {}} == {**new, "starts": {}}


def _eval_period(run_dir: Path) -> int:
    """Every how many rounds the run evaluated (its config.json; 0 = the method's default),
    or 0 (nothing divides it) if that cannot be read."""
    from config import parse
    from config.schema import ConfigError, merged

    try:
        saved = json.loads((run_dir / "config.json").read_text())
        return parse(merged(saved)).run.eval_period
    except (OSError, ValueError, ConfigError, KeyError, TypeError):
        return 0


def _rounds_arg(args) -> int | None:
    args = list(args or [])
    return int(args[args.index("--rounds") + 1]) if "--rounds" in args else None


def _without_rounds(args) -> list:
    args = list(args or [])
    if "--rounds" in args:
        k = args.index("--rounds")
        del args[k : k + 2]
    return args


def _pair(recorded: dict, launch: dict, run_config: str) -> tuple[dict, dict]:
    """What decides the recorded run and this launch (`_used`), compared on the defaults both
    know: a run-config key added since the run was made (or removed) is no change, because a
    new key's default keeps what the code did before the key existed (the rule every setting
    in config/ follows); a key both know with another default is another launch."""
    old, new = _used(recorded, run_config), _used(launch, run_config)
    if not recorded.get("defaults"):  # made before study.json kept the defaults: unknown
        return old, new
    both = old["defaults"].keys() & new["defaults"].keys()
    for u in (old, new):
        u["defaults"] = {k: v for k, v in u["defaults"].items() if k in both}
    return old, new


# defaults whose 0 means "resolved elsewhere" (issue 64): the rounds, when --rounds gives them;
# FedVLN's share of seen houses, which the resolved recipe carries (`_recipe_changed`)
RESOLVED = {"num-server-rounds": "--rounds", "fedvln.seen-rate": None}


def _used(launch: dict, run_config: str) -> dict:
    """What of a launch decides the run: its arguments, its policy, and the defaults its run
    config does not override (a changed default that the run sets itself changes nothing;
    nor does one that is resolved where the comparison sees it: RESOLVED)."""
    args = launch.get("args") or []
    mine = set(parse_overrides(run_config))
    mine |= {k for k, flag in RESOLVED.items() if flag is None or flag in args}
    used = {k: v for k, v in (launch.get("defaults") or {}).items() if k not in mine}
    return {
        "args": _placed(launch.get("args")),
        "defaults": used,
        "policy": launch.get("policy"),
        "starts": launch.get("starts", {}),
    }


# flags whose value names where a run lives, not what it is: the run folder is where study.json
# is, and the policy is keyed by its bytes ("policy"), so a runs folder moved or copied to
# another checkout is the same launch, not one to train again
PLACE_FLAGS = ("--out", "--policy")


def _placed(args: list[str] | None) -> list[str] | None:
    """A launch's arguments without the paths of PLACE_FLAGS."""
    if args is None:
        return None
    return [a for i, a in enumerate(args) if i == 0 or args[i - 1] not in PLACE_FLAGS]


def _starts(run_config: str) -> dict[str, str]:
    """The digest of each checkpoint the run config starts a run from (a `*-init` key): the
    same path holding another checkpoint (a stage retrained) is another launch."""
    return {
        k: path_digest(v) if Path(str(v)).is_file() else f"missing:{v}"
        for k, v in parse_overrides(run_config).items()
        if k.endswith("-init") and v
    }


def _look(method: str, run_config: str) -> int | None:
    """FedVLN's appearance formula where the run has one on (envs/vln_appearance.LOOK_VERSION,
    code, not a run-config default): a run made on another look is another launch."""
    if method != "fedvln":
        return None
    from config import parse
    from config.schema import merged
    from envs.vln_appearance import LOOK_VERSION

    overrides = {**parse_overrides(run_config), "method": "fedvln"}
    return LOOK_VERSION if parse(merged(overrides)).fedvln.appearance > 0 else None


def _recipe_changed(run_dir: Path, method: str, run_config: str) -> bool:
    """FedVLN's recipe (config/fedvln_recipe.py) is code, not a run-config default, so study.json
    cannot see it change: a run whose config.json records another resolved recipe (optimizer,
    lr, eta) than these settings give today is another launch."""
    if method != "fedvln":
        return False
    from config import parse
    from config.fedvln_recipe import recipe_record, recorded_recipe
    from config.schema import merged

    try:
        done = recorded_recipe(json.loads((run_dir / "config.json").read_text()))
    except (OSError, ValueError, AttributeError):
        return False
    if done is None:
        return False

    return done != recipe_record(parse(merged(parse_overrides(run_config))).fedvln)


def _finished(run_dir: Path, rounds: int) -> bool:
    """All `rounds` rounds in rounds.csv, or the run stopped itself by its convergence rule."""
    done = pd.read_csv(run_dir / "rounds.csv")
    if len(done) and done["round"].max() >= rounds:
        return True
    try:
        conv = json.loads((run_dir / "config.json").read_text()).get("convergence") or {}
    except (OSError, ValueError):
        return False
    return bool(conv.get("stopped_early"))


def path_digest(path: str | Path) -> str:
    """SHA-256 of a data file's bytes, or of a folder's file names and bytes ("" for none)."""
    if not path:
        return ""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def run_fingerprint(settings, data_fields: tuple[str, ...] = (), **extra) -> str:
    """What decides a cached run's numbers, as one SHA-256: every field of its settings, the
    bytes of every data file or folder they name (`data_fields`), and `extra` (method, rounds,
    evaluation cadence, the code's exchange version). A cached run is reused only under the
    same fingerprint: another map file, range, rule, setting or exchange retrains it. A data
    file counts by its bytes alone, so the same data in another folder (a clean clone in CI,
    a reviewer's checkout) has the same fingerprint."""
    paths = [str(getattr(settings, k)) for k in data_fields]

    def unplaced(text: str) -> str:  # a data file counts by its bytes, not where it lies
        for k, path in zip(data_fields, paths):
            text = text.replace(path, f"<{k}>") if path else text
        return text

    parts = {
        f.name: unplaced(repr(getattr(settings, f.name))) for f in dataclasses.fields(settings)
    }
    parts.update({f"digest:{k}": path_digest(getattr(settings, k)) for k in data_fields})
    parts.update({f"job:{k}": repr(v) for k, v in sorted(extra.items())})
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def job_fingerprint(settings, data_field: str, job: dict, exchange: int, **extra) -> str:
    """A table job's run_fingerprint: its settings, the bytes of the data file or folder named
    by `data_field`, the job's method, rounds, evaluation cadence and exchange version, and
    `extra` (e.g. the floating-point kernels: experiments/fedrl.numerics)."""
    return run_fingerprint(
        settings,
        (data_field,),
        method=job["method"],
        rounds=job["rounds"],
        eval_every=job["eval_every"],
        exchange=exchange,
        **extra,
    )


def cached(path: Path, fingerprint: str, train, describe) -> list[dict]:
    """The rows of a finished run kept at `path` if it was trained under `fingerprint` (see
    run_fingerprint: anything else is trained again, never reused); else `train()`'s rows,
    written atomically (a killed run leaves nothing half-written to resume from) with one
    progress line, `describe(rows)`."""
    if path.exists():
        out = json.loads(path.read_text())
        if out and out[0].get("fingerprint") == fingerprint:
            return out
    out = train()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(path)
    print(describe(out), flush=True)
    return out


def in_parallel(fn, items: list, jobs: int, desc: str, processes: bool = False) -> list:
    """`fn` over `items`, `jobs` at a time (threads, or processes for in-process training),
    with a bar of finished runs on stderr; results in the order of `items`. The first run
    that fails stops the script with its error once the runs under way finish (none queued
    behind it starts)."""
    if processes:  # a worker trains in-process: it ends with the study (launch/lifetime.py);
        # forked, so that its parent is the study (not a fork server)
        end = functools.partial(die_with, os.getpid(), signal.SIGKILL)
        pool = ProcessPoolExecutor(jobs, mp_context=get_context("fork"), initializer=end)
    else:
        pool = ThreadPoolExecutor(jobs)
    with pool:
        futures = [pool.submit(fn, x) for x in items]
        try:
            for f in tqdm(as_completed(futures), total=len(futures), desc=desc, unit="run"):
                f.result()
        except BaseException:  # the queued runs do not start; the running ones finish
            for f in futures:
                f.cancel()
            raise
        return [f.result() for f in futures]


def command_line(script: str, argv: list[str] | None = None) -> str:
    """How a script was invoked, for the results' provenance: `python -m <module> <args>`.

    `script` is the calling module's `__file__` (always inside the project, wherever the venv
    or the caller is: a notebook calling `main([...])` gets its own arguments, not the
    notebook's); `argv` is what its `main` parsed (None: the command line's)."""
    module = Path(script).resolve().with_suffix("").relative_to(ROOT).as_posix().replace("/", ".")
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return shlex.join(["python", "-m", module, *args])


def machine_label() -> str:
    """What a benchmark's rows name the machine by: processor and core count."""
    import os
    import platform

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
