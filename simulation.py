"""Run any method in Flower's simulation engine (Ray backend) on this machine.

    python simulation.py <method> --rounds N --num-clients N --fraction F --seed S --out DIR
                         [--num-cpus X --num-gpus Y] [--run-config "k=v ..."]

This runs the same ServerApp and ClientApp as `flwr run .`, through Flower's supported path: it
starts its own `flower-superlink --simulation` (no per-run dependency installation) on a free
loopback port with a private FLWR_HOME, submits the app with `flwr run`, streams the progress,
checks the run's final status with `flwr ls` (`flwr run` exits 0 even when the run failed),
writes plots, and stops every process it started, Ray's included. Exit codes: 0 the run
completed, 1 it failed, 2 bad input (one line naming the culprit).
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from launch.lifetime import stop_with_parent, undisturbed
from launch.superlink import LocalSuperLink, wait_finished

ROOT = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


class BadInput(Exception):
    """Reported as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise BadInput(message)


def build_parser() -> argparse.ArgumentParser:
    from config.methods import METHODS

    lines = "\n".join(f"  {m.name:<10} {m.description}" for m in METHODS.values())
    p = Parser(
        prog="simulation.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"methods:\n{lines}",
    )
    p.add_argument("method", nargs="?", help="one of: " + ", ".join(METHODS))
    p.add_argument(
        "--list-config",
        nargs="?",
        const="",
        metavar="METHOD|SECTION",
        help="print every run-config key with its default and meaning (only those a method "
        "reads, or one section: run, driving, fedprox, cdl, faults, fedrl, fedvln) and exit",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="server rounds (default: the method's, 5; 180 for fedvln --stage speaker under "
        "the cpu recipe)",
    )
    p.add_argument("--num-clients", type=int, default=None, help="simulated SuperNodes")
    p.add_argument("--fraction", type=float, default=None, help="share of clients per round")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", default=None, help="results folder (default runs/<method>-<time>)")
    p.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the run in DIR after its last finished round, with its saved "
        "method and run config (--rounds may raise the total); clients reload their own "
        "state as of that round",
    )
    p.add_argument(
        "--topology",
        default=None,
        help="peer topology: ring, complete, <graph>-ring, <graph>-mst (e.g. gaia-ring); "
        "a graph's topology fixes the number of silos",
    )
    p.add_argument(
        "--stage",
        default=None,
        help="fedvln: agent | speaker | augment | preexplore (fedvln.stage)",
    )
    p.add_argument(
        "--variant",
        default=None,
        help="fedvln preexplore: env-based | fed-full | fed-lan | fed-lan+seen",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="run the ClientApps on an existing Ray cluster (its head, started with "
        "`ray start --head`; default: RAY_ADDRESS, else a private local Ray, never a "
        "cluster a `ray start` left running)",
    )
    p.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="the nodes' privacy policy (clients/policy.py; deploy/policies/): you run every "
        "node, so you are their operator; default: the papers' protections",
    )
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs per ClientApp (default 1)")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per ClientApp (default 0)")
    p.add_argument("--run-config", default="", help='extra run config, e.g. "driving.lr=0.05"')
    p.add_argument("--timeout", type=float, default=6 * 3600, help="give up after (s)")
    p.add_argument("--no-plots", action="store_true", help="do not write plots at the end")
    p.add_argument("--verbose", action="store_true", help="show Flower's and Ray's full log")
    return p


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def resolve(args) -> tuple[dict, Path]:
    """Validate flags and run config; returns (run-config overrides, out dir)."""
    from config import check_overrides, methods, parse
    from config.run import MIN_TIMEOUT_S
    from config.schema import ConfigError, defaults, parse_overrides

    if args.ray_address is not None:
        check_ray_address(args.ray_address)
    if args.policy:  # the nodes' policy, checked before anything starts (clients/policy.py)
        from clients.policy import PolicyError, load

        try:
            load(args.policy)
        except PolicyError as e:
            raise BadInput(f"--policy {e}") from None
    # the run config's 0 means "the default" (num-server-rounds, fedvln.seen-rate); a flag
    # says a number, so 0 is refused here, resumed runs included
    if args.rounds is not None and args.rounds < 1:
        raise BadInput(f"bad value for --rounds: {args.rounds} (at least 1)")
    if args.fraction is not None and not 0 < args.fraction <= 1:
        raise BadInput(f"bad value for --fraction: {args.fraction} (in (0, 1])")
    if args.resume:
        return resume_overrides(args)
    if args.method not in methods.METHODS:
        close = difflib.get_close_matches(str(args.method), list(methods.METHODS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise BadInput(
            f"unknown method {args.method!r} (choose from: {', '.join(methods.METHODS)}){hint}"
        )
    # the launcher's own flags; --rounds, --num-clients, --fraction and --seed are run-config
    # keys, checked with the rest of the run config below (the error names the flag)
    for flag, value, ok in [
        ("--num-cpus", args.num_cpus, lambda v: v >= 1),
        ("--num-gpus", args.num_gpus, lambda v: v >= 0),
        ("--timeout", args.timeout, lambda v: MIN_TIMEOUT_S <= v < math.inf),
    ]:
        if value is not None and not ok(value):
            raise BadInput(f"bad value for {flag}: {value}")
    if args.num_gpus > 0:
        import torch

        if not torch.cuda.is_available():  # else Ray never schedules a ClientApp: a hang
            raise BadInput(
                f"--num-gpus {args.num_gpus:g}: this machine has no CUDA GPU torch can use"
            )
    try:
        overrides = parse_overrides(args.run_config)
        # --stage / --variant are fedvln.stage / variant: checked with the keys that need them
        domain = methods.domain_of(args.method)  # what the method's data fixes (domains/)
        for flag in ("stage", "variant"):
            if getattr(args, flag) and flag not in domain.FLAGS:
                raise BadInput(f"--{flag} is not a flag of {args.method} (it is fedvln's)")
        flagged = {f"fedvln.{f}": getattr(args, f) for f in domain.FLAGS if getattr(args, f)}
        check_overrides({**overrides, **flagged})
    except ConfigError as e:
        raise BadInput(str(e)) from None
    asked = [k for k in ("resume", "resume-round") if overrides.get(k)]
    if asked:  # a fresh launch that says it resumes: the nodes would look for another run's state
        raise BadInput(
            f"--run-config {' '.join(asked)}: a run is resumed with --resume DIR (which sets "
            "them from DIR's finished rounds), not on a fresh launch"
        )
    cfg = {**defaults(), **overrides}
    flags = {
        "num-server-rounds": args.rounds,
        "num-clients": args.num_clients,
        "fraction-train": args.fraction,
        "seed": args.seed,
        "topology": args.topology,
        "fedvln.stage": args.stage,
        "fedvln.variant": args.variant,
    }
    flags[domain.FRACTION_KEY] = flags.pop("fraction-train")  # FedVLN: r, the seen houses'
    overrides.update({k: v for k, v in flags.items() if v is not None})
    try:
        parse(overrides)
    except ConfigError as e:
        flag = {
            "num-server-rounds": "--rounds",
            "num-clients": "--num-clients",
            domain.FRACTION_KEY: "--fraction",
            "seed": "--seed",
        }
        key = next((k for k in flag if repr(k) in str(e) and flags.get(k) is not None), None)
        raise BadInput(f"{flag[key]}: {e}" if key else str(e)) from None
    cfg.update(overrides)
    absolute_paths(cfg, overrides)
    try:  # a GML graph's silos, FedRL's two parties, FedVLN's houses
        parties = domain.parties(parse(cfg), args.num_clients)
    except ConfigError as e:
        raise BadInput(str(e)) from None
    if parties is not None:
        overrides["num-clients"] = cfg["num-clients"] = parties
    overrides["method"] = args.method
    out = Path(args.out or f"runs/{args.method}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    check_out(out)
    if (out / "rounds.csv").exists():
        raise BadInput(f"--out {out} already holds a run (rounds.csv); choose another folder")
    overrides["out-dir"] = str(out)
    try:
        methods.check_dp(parse(cfg))
        methods.server_module(args.method).check_config(parse(cfg))
    except ConfigError as e:
        raise BadInput(str(e)) from None
    try:
        c = parse(cfg)
        c.faults.check_partitions(c.run.num_clients)
        domain.check_data(c)
    except ConfigError as e:
        raise BadInput(str(e)) from None
    check_policy(domain, c, args.policy)
    return overrides, out


def check_policy(domain, c, policy_file: str | None) -> None:
    """BadInput, before anything starts, for a run the simulated nodes would refuse under
    their policy (clients/policy.py: the file --policy names, else the secure default; each
    node enforces it again at every message)."""
    from clients.policy import Policy, load
    from config.schema import ConfigError

    try:
        domain.check_policy(c, load(policy_file) if policy_file else Policy())
    except ConfigError as e:
        raise BadInput(str(e)) from None


SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/boot", "/etc", "/bin", "/sbin", "/usr", "/lib")


def check_out(out: Path) -> None:
    """--out must be a folder we may create and write, outside the system's own folders."""
    if out == Path(out.anchor) or any(
        out == Path(d) or Path(d) in out.parents for d in SYSTEM_DIRS
    ):
        raise BadInput(f"--out {out}: a system folder; choose a folder of your own")
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise BadInput(f"--out {out}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise BadInput(f"--out {out}: {probe} is not writable")


def resume_overrides(args) -> tuple[dict, Path]:
    """The run config saved in DIR/config.json, with resume = true (the ServerApp then goes on
    after the last round of DIR/rounds.csv). Nothing read there is trusted: the saved config
    goes through the checks a fresh run's flags get, and rounds.csv must number its rounds
    1, 2, ..., k; the method is DIR's (a method given as well must agree)."""
    import json

    from config import check_overrides
    from config.schema import ConfigError, defaults

    try:
        out = Path(args.resume).resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop, an unreadable component
        raise BadInput(f"--resume {args.resume}: not a folder that can be opened ({e})") from None
    shaping = [
        f
        for f, v in (
            ("--num-clients", args.num_clients),
            ("--fraction", args.fraction),
            ("--seed", args.seed),
            ("--out", args.out),
            ("--topology", args.topology),
            ("--run-config", args.run_config),
        )
        if v
    ]
    if shaping:
        raise BadInput(
            f"--resume takes the run config from {out}/config.json; {shaping[0]} "
            f"cannot change it (only --rounds can)"
        )
    try:
        saved = json.loads((out / "config.json").read_text())
        if not isinstance(saved, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise BadInput(f"--resume {out}: no readable config.json ({e})") from None
    if args.method is not None and saved.get("method") != args.method:
        raise BadInput(f"--resume {out}: that run is {saved.get('method')!r}, not {args.method!r}")
    args.method = saved.get("method")
    if not (out / "rounds.csv").exists():
        raise BadInput(f"--resume {out}: no rounds.csv (no round finished); start it again")
    overrides = {k: v for k, v in saved.items() if k in defaults()}
    if args.rounds is not None:
        overrides["num-server-rounds"] = args.rounds
    try:  # the checks a fresh run gets, before Flower or Ray start
        rounds = check_overrides(overrides).run.num_server_rounds
    except ConfigError as e:
        raise BadInput(f"--resume {out}/config.json: {e}") from None
    done = finished_rounds(out / "rounds.csv")
    if done >= rounds:
        raise BadInput(
            f"--resume {out}: all {done} rounds are done; --rounds N (> {done}) runs more"
        )
    overrides.update({"resume": True, "resume-round": done, "out-dir": str(out)})
    from config import methods, parse

    # the data the saved config names must still be there (a moved folder failed inside the run)
    domain = methods.domain_of(args.method)
    try:
        domain.check_data(parse(overrides))
    except ConfigError as e:
        raise BadInput(f"--resume {out}: {e}") from None
    check_policy(domain, parse(overrides), args.policy)
    return overrides, out


def finished_rounds(path: Path) -> int:
    """The last round of a results folder's rounds.csv (server.recorder.finished_rounds)."""
    from config.schema import ConfigError
    from server.recorder import finished_rounds as read_rounds

    try:
        return read_rounds(path)
    except ConfigError as e:
        raise BadInput(f"--resume: {e}") from None


def absolute_paths(cfg: dict, overrides: dict) -> None:
    """Apps run from a copy in FLWR_HOME, so paths must be absolute; the topology folder
    defaults to ../shared/data/topologies beside this project."""
    from strategies.topology import DEFAULT_TOPOLOGY_DIR

    for key in (
        "driving.data-dir",
        "topology-dir",
        "fedrl.map-file",
        "fedrl.t2a-data",
        "fedvln.data-dir",
        "fedvln.features-tsv",
        "fedvln.agent-init",
        "fedvln.speaker-init",
    ):
        if str(cfg[key]):
            overrides[key] = cfg[key] = str(Path(str(cfg[key])).resolve())
    if not str(cfg["topology-dir"]) and str(cfg["topology"]) not in ("ring", "complete"):
        overrides["topology-dir"] = cfg["topology-dir"] = str(DEFAULT_TOPOLOGY_DIR)


def check_ray_address(address: str) -> None:
    """`--ray-address` is host:port of a running Ray head; say so now, not after Ray's retries."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(f"--ray-address must be HOST:PORT of a Ray head, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise BadInput(
            f"--ray-address {address}: no Ray head answers there ({e}); start one "
            f"with `ray start --head --port {port}`"
        ) from None


def node_policy(args, out: Path) -> Path:
    """The policy every simulated node reads (through FEDEMBODIED_POLICY): `--policy FILE`
    (checked in resolve(), so a bad file stops the launcher, not every node), with the nodes' state and
    audit logs in `<out>/client-state` unless the file names a state-dir of its own."""
    from clients.policy import load

    path = out / "node-policy.toml"
    if args.resume and not args.policy and path.is_file():
        return path  # a resumed run keeps the policy it started with
    text = ""
    if args.policy:
        mine = load(args.policy)  # checked in resolve()
        text = Path(args.policy).read_text()
        if mine.state_dir:
            return Path(args.policy).resolve()
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # only its operator's
    with os.fdopen(fd, "w") as f:
        f.write(
            f"# written by simulation.py from {args.policy or 'the default policy'}\n"
            f"state-dir = {json.dumps(str(out.resolve() / 'client-state'))}\n{text}"
        )
    return path


def launch(args, overrides: dict, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    policy = node_policy(args, out)
    print("starting a local Flower SuperLink (simulation engine) ...", flush=True)
    link = LocalSuperLink(args.ray_address, policy)
    run_id = None
    try:
        level = "INFO" if args.verbose else "ERROR"
        fed = " ".join(
            [
                f"num-supernodes={int(overrides.get('num-clients') or default('num-clients'))}",
                f"client-resources-num-cpus={args.num_cpus}",
                f"client-resources-num-gpus={args.num_gpus}",
                f'init-args-logging-level="{level}"',
                "init-args-log-to-driver=true",  # ClientApps' progress lines reach `flwr log`
            ]
        )
        rc = " ".join(f"{k}={toml_value(v)}" for k, v in overrides.items())
        print("submitting the app with `flwr run` ...", flush=True)
        started = link.flwr(
            "run",
            str(ROOT),
            "fedsim",
            "--run-config",
            rc,
            "--federation-config",
            fed,
            "--format",
            "json",
            timeout=300,
        )
        try:
            run_id = int(json.loads(started.stdout)["run-id"])
        except (json.JSONDecodeError, KeyError, ValueError):
            print(
                f"simulation.py: flwr run did not start the run:\n{started.stdout}{started.stderr}",
                file=sys.stderr,
            )
            return 1
        print(f"run {run_id}: {overrides['method']}, results in {out}", flush=True)
        print(
            "Ray is starting the ClientApps; the first round includes that start-up "
            "(progress lines follow)",
            flush=True,
        )
        served = follow(link, run_id, args, out / "flower.log")
        status, details = wait_finished(link, run_id, DRAIN_S if served else args.timeout)
        if served and not status.startswith("finished"):
            # the ServerApp wrote every result; Flower's engine would wait for a client call
            # that hangs (faults.hang-s, or a real one) before it ends the run
            print(
                f"simulation.py: results complete; stopping client calls still running "
                f"{DRAIN_S:.0f} s after the ServerApp ended (a hung client)",
                file=sys.stderr,
            )
            link.flwr("stop", str(run_id), "fedsim", timeout=60)
            status = "finished:completed"
        if status != "finished:completed":
            print(
                f"simulation.py: run {run_id} ended with status {status}: {details} "
                f"(full log: {out / 'flower.log'})",
                file=sys.stderr,
            )
            return 1
        run_id = None
        return 0
    except KeyboardInterrupt:
        print("simulation.py: interrupted; stopping the run", file=sys.stderr)
        return 130
    finally:
        with undisturbed():
            if run_id is not None:
                link.flwr("stop", str(run_id), "fedsim", timeout=60)
            link.stop()


def default(key: str):
    from config.schema import defaults

    return defaults()[key]


DRAIN_S = 15.0  # after the ServerApp's last line, how long client calls may take to end


def follow(link: LocalSuperLink, run_id: int, args, log_path: Path) -> bool:
    """Stream the run's log into log_path; show our per-round lines (everything with --verbose).
    True when the ServerApp logged that it is done (then stop following)."""
    proc = subprocess.Popen(
        [str(BIN / "flwr"), "log", str(run_id), "fedsim", "--stream"],
        env=link.env,
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + args.timeout
    try:
        with open(log_path, "w") as log:
            for line in proc.stdout:
                log.write(line)
                show(line, args.verbose)
                if "[fedembodied] done:" in line:
                    return True
                if time.monotonic() > deadline:
                    break
    finally:
        proc.kill()
        proc.wait()
    return False


def show(line: str, verbose: bool) -> None:
    """Our `[fedembodied]` lines (a ClientApp's prefixed `client:`), errors, or everything."""
    if verbose:
        print(line, end="", flush=True)
    elif "[fedembodied]" in line:
        where = "client: " if "ClientAppActor" in line else ""
        print(where + line.split("[fedembodied]", 1)[1].strip(), flush=True)
    elif "ERROR" in line or "Exception" in line:
        print(line.rstrip(), flush=True)


def _terminate(signum, frame):
    """SIGTERM (or SIGHUP) would end the launcher without its clean-up and leave the engine and
    Ray running; turn it into the KeyboardInterrupt that launch() already handles."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.list_config is not None:
            from config import ConfigError, render

            try:
                print(render(args.list_config or None), end="")
            except ConfigError as e:
                raise BadInput(str(e)) from None
            return 0
        if args.method is None and not args.resume:  # a resumed run's method is its folder's
            raise BadInput("the method is required (see --help), or --list-config or --resume DIR")
        overrides, out = resolve(args)
    except BadInput as e:
        print(f"simulation.py: error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)  # `kill` cleans up like Ctrl-C does
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # a closed terminal too (not
        signal.signal(signal.SIGHUP, _terminate)  # under nohup, which ignores it)
    # a launcher started in the background inherits SIGINT ignored (POSIX `&`); an explicit
    # `kill -INT` must still stop the run and clean up
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_with_parent()  # a study's run ends with the study (launch/lifetime.py)
    if args.no_plots:
        overrides["plots"] = False
    code = launch(args, overrides, out)
    if code == 0:
        print(f"results: {out}/rounds.csv, {out}/clients.csv, {out}/config.json")
        plots = sorted((out / "plots").glob("*.png"))
        if plots:  # the ServerApp wrote them
            print(f"plots:   {out / 'plots'} ({len(plots)} PNGs; summary.png has the headline)")
        print(f"curves:  tensorboard --logdir {out}")
        after_run(out)
    return code


def after_run(out: Path) -> None:
    """What the method's domain writes from the finished run, with the data this launcher holds
    and the server does not (FedVLN's speaker stage: said.csv, every val path's instruction)."""
    try:
        method = json.loads((out / "config.json").read_text()).get("method")
    except (OSError, ValueError, AttributeError):
        return
    from config import methods

    if method not in methods.METHODS:
        return
    try:
        path = methods.domain_of(method).after_run(out)
    except Exception as e:  # the run's results stand; only this file is missing
        print(f"simulation.py: warning: nothing written after the run: {type(e).__name__}: {e}")
        return
    if path:
        print(f"also:    {path}")


if __name__ == "__main__":
    sys.exit(main())
