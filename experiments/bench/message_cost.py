"""Where a deployed message's time goes: the same small job of each method run in Flower's
simulation engine and in its deployment engine on loopback, deployed as docs/deployment.md says
(TLS, SuperNode authentication, the edge and the Fleet gateway of deploy/superlink.sh).

    python -m experiments.study experiments/studies/message_cost.toml --jobs 1   # ~40 min

Per method and engine, from the run's rounds.csv (server side) and the nodes' audit logs (each
reply's `cost`, clients/costs.py):

- `message_s`: a message's wall time as the server sees it (round wall time / messages; FedRL's
  messages are a chain, FedAvg's two silos answer at once, so its figure is per round trip);
- `process_age_s`: how old the ClientApp process was when our handler was called. Deployed,
  every message is a fresh `flwr-clientapp` process: Python's start, the imports, and Flower
  connecting to its SuperNode and handing over the message and context. `imports_s` is the
  imports alone (Flower's client entry + our app + the method's handler), timed in fresh
  processes on the same machine;
- `handler_s`, split into the phases our handlers name: `rebuild_s` (what the handler
  re-creates from the run config and the context), `work_s` (the method's step), `state_s` /
  `save_s` (the node's saved state and the context);
- `ours_s`: our overhead, handler_s - work_s + the imports of our own modules
  (`our_imports_s`: the app's and the handler's imports in a process that has imported
  Flower's client entry and torch, or, for `warm`, what the warm parent preloads; median of 5
  fresh processes);
- `transport_s` = message_s - process_age_s - handler_s: Flower's spawn, polling and the
  round trips through the edge, the gateway and the SuperLink.

Flower's waits, and the deployed variants (`--variants`, each a deployed run in the same
invocation): a SuperNode that pulled nothing sleeps 3 s before it pulls again
(`flwr/supernode/start_client_internal.py`, `time.sleep(3)`) and checks for the ClientApp's
reply every 0.5 s, hard-coded in 1.41; its SuperExec polls for tasks every
`FLWR_SUPEREXEC_TASK_POLL_INTERVAL` s (default 1). A chain of messages (FedRL) waits on each
once per message. `flower`: all of Flower's own (FEDEMBODIED_QUICK_POLL=0, SuperExec poll 1 s,
a cold process per message); `quick`: deploy/quick_poll.py's polls (0.2 s idle poll for a
minute after each message, 0.05 s reply check; SuperExec poll 0.1 s), still cold; `warm`:
deploy/supernode.sh's defaults, those polls and each message's process forked by the node's
warm parent (deploy/warm_start.py). The ServerApp pulls replies every
strategies/timeouts.REPLY_POLL_S, its own loop, in all.

Jobs are the methods' own small jobs, and `fedrl-text2action`: FedRL on Table 2's domain
(10-word texts; its evaluation round costs two messages a word), whose parties rebuild more
per message than Grid-World's (their corpora and word vectors, kept on the node's disk by
envs/prepared.py).

The study file names the methods, the deployed variants and the rounds; each method is one
call of `measure` (its simulated run, then each variant deployed, one after another; `--jobs 1`,
since the figures are times). Runs finished in the work folder (`runs/message_cost`) are
reused. Results: experiments/results/message_cost{,_runs}.csv and message_cost.png;
docs/performance.md shows the table. The ratio column is deployed / simulated for the same job,
measured in the same call.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from clients.audit import read
from experiments import figures
from experiments.bench.loopback import (
    PYTHON,
    ROOT,
    Federation,
    free_port,
    free_ports,
    unwind_on_sigterm,
    wait_for,
    wait_listening,
)
from experiments.simulate import run_child
from experiments.tables import pipe_table

T2A_DATA = ROOT.parent / "shared" / "data" / "text2action"
# the same small job in both engines: two nodes, `--rounds` rounds
JOBS = {
    "fedrl": (  # study mode: the two engines must release the same noise (tests/test_parity)
        "fedrl.envs=4 fedrl.act-steps=2 fedrl.updates=4 fedrl.warmup=8 fedrl.batch-size=8 "
        "fedrl.max-steps=4 fedrl.reproducible-noise=true"
    ),
    "fedavg": (
        "driving.image-size=32 driving.train-per-silo=40 driving.test-per-silo=16 "
        "driving.local-epochs=1"
    ),
    "cdl": (
        "driving.image-size=32 driving.train-per-silo=40 driving.test-per-silo=16 "
        "driving.local-epochs=1"
    ),
    "fedrl-text2action": (  # Table 2's domain: a round is 2 x act-steps + 3 messages and
        # the evaluation (the last round) two messages per word of the longest text
        f'fedrl.domain="text2action" fedrl.t2a-data="{T2A_DATA}" '
        "fedrl.t2a-words=10 fedrl.envs=4 fedrl.act-steps=4 fedrl.updates=8 fedrl.warmup=16 "
        "fedrl.batch-size=8 fedrl.reproducible-noise=true"
    ),
    "fedvln": (  # two seen houses and one unseen: the smallest federation with every role;
        # one seen house a round, as when its rows were measured (research policy: allowed)
        'fedvln.stage="agent" fedvln.train-houses=2 fedvln.unseen-houses=1 fedvln.embedding=16 '
        "fedvln.hidden=32 fedvln.max-local-steps=2 fedvln.seen-rate=0.5 "
        "fedvln.min-round-houses=1"
    ),
}
# the nodes' policy where a job asks more than the paper's default allows (FedRL's study mode,
# FedVLN's one-house rounds)
RESEARCH = str(ROOT / "deploy" / "policies" / "research.toml")
POLICY = {"fedrl": RESEARCH, "fedrl-text2action": RESEARCH, "fedvln": RESEARCH}
NODES = {"fedvln": 3}  # one SuperNode per house; every other job here has two nodes
SEQUENTIAL = {"fedrl", "fedrl-text2action"}  # their messages go one after another
METHOD = {"fedrl-text2action": "fedrl"}  # a job on another domain: the method it runs
HANDLER = {
    "fedrl": "clients.fedrl_client",
    "fedrl-text2action": "clients.fedrl_client",
    "fedavg": "clients.driving_client",
    "cdl": "clients.cdl_client",
    "fedvln": "clients.fedvln_client",
}


def method_of(job: str) -> str:
    """The method (simulation.py's, the run config's `method`) a job of this study runs."""
    return METHOD.get(job, job)


def nodes(method: str) -> int:
    """SuperNodes (simulated clients) of a method's small job."""
    return NODES.get(method, 2)


def import_seconds(modules: list[str], after: tuple[str, ...] = (), repeats: int = 5) -> float:
    """Median wall time of importing `modules` in a fresh Python process, `after` those are
    imported in it (timed apart from them: a difference within one process, not of two
    processes' medians, which moved by 0.1-0.2 s between calls on this machine)."""
    code = (
        "import time; "
        + "".join(f"import {m}; " for m in after)
        + "t = time.perf_counter(); "
        + "; ".join(f"import {m}" for m in modules)
        + "; print(time.perf_counter() - t)"
    )
    runs = [
        float(
            subprocess.run(
                [PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout
        )  # fmt: skip
        for _ in range(repeats)
    ]
    return statistics.median(runs)


def warm_preload() -> tuple[str, ...]:
    """What a node's warm parent imports before it forks a message's process."""
    spec = importlib.util.spec_from_file_location("warm_start", ROOT / "deploy" / "warm_start.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PRELOAD


def sent_replies(folder: Path) -> pd.DataFrame:
    """Every reply the nodes under `folder` sent (their audit logs, clients/audit.py), queries
    left out."""
    rows = [r for log in sorted(folder.rglob("audit/partition-*.jsonl")) for r in read(log)]
    got = pd.DataFrame(rows)
    return got[(got.kind != "query") & (got.status == "sent")]


def audit_costs(replies: pd.DataFrame) -> pd.DataFrame:
    """What each reply cost its node (clients/costs.py)."""
    return pd.DataFrame([c for c in replies.get("cost", []) if isinstance(c, dict)])


def exchanges(method: str, out: Path, replies: pd.DataFrame) -> pd.Series:
    """Messages one after another in each round: every reply of both parties for FedRL (its
    messages are a chain, evaluation included), one node's replies for a method whose nodes
    answer at once."""
    rounds = pd.read_csv(out / "rounds.csv")["round"]
    got = replies[replies["round"] > 0]
    if method not in SEQUENTIAL:
        got = got[got.partition == got.partition.min()]
    return got.groupby("round").size().reindex(rounds).fillna(0).reset_index(drop=True)


def simulated(method: str, rounds: int, work: Path) -> Path:
    out = work / f"{method}-sim"  # its nodes' audit logs: out/client-state/audit
    if (out / "rounds.csv").is_file() and len(pd.read_csv(out / "rounds.csv")) == rounds:
        return out  # finished in this --work folder before
    cmd = [PYTHON, str(ROOT / "simulation.py"), method_of(method), "--rounds", str(rounds), "--seed", "0",
           "--out", str(out), "--no-plots", "--num-clients", str(nodes(method)), "--run-config",
           f"eval-every={rounds} {JOBS[method]}",
           *(["--policy", POLICY[method]] if method in POLICY else [])]  # fmt: skip
    run_child(cmd, check=True)
    return out


POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"  # Flower's SuperExec poll, default 1 s
# the deployed variants: the environment of every process of the federation (module docstring)
VARIANTS = {
    "flower": {"FEDEMBODIED_QUICK_POLL": "0", POLL_ENV: "1", "FEDEMBODIED_WARM_START": "0"},
    "quick": {"FEDEMBODIED_QUICK_POLL": "1", POLL_ENV: "0.1", "FEDEMBODIED_WARM_START": "0"},
    "warm": {"FEDEMBODIED_QUICK_POLL": "1", POLL_ENV: "0.1", "FEDEMBODIED_WARM_START": "1"},
}


def deployed(method: str, rounds: int, work: Path, variant: str = "warm") -> Path:
    """deploy/make_certs.sh, superlink.sh --tls (edge + gateway + SuperLink), two registered
    SuperNodes with their own keys and state folders, `flwr run` from the operator's CLI;
    `variant`: whose poll intervals (VARIANTS)."""
    tmp = work / f"{method}-deploy-{variant}"
    done = tmp / "out" / "rounds.csv"
    if done.is_file() and len(pd.read_csv(done)) == rounds:
        return tmp  # finished in this --work folder before
    if tmp.exists():
        raise SystemExit(f"message_cost: {tmp} holds an unfinished deployed run; remove it")
    fed = LoopbackFederation(method, tmp, VARIANTS[variant])
    try:
        fed.finish(fed.submit(rounds))
        return tmp
    finally:
        fed.close()


class LoopbackFederation(Federation):
    """A SuperLink behind the edge with TLS and node authentication, and two registered
    SuperNodes (FedRL: alpha and beta; FedVLN: one per house, three), each with its own key and
    state folder, on loopback;
    the operator's CLI connected as `op`."""

    def __init__(self, method: str, tmp: Path, env: dict | None = None):
        tmp.mkdir(parents=True)
        super().__init__(tmp)
        self.method, self.certs, self.out = method, tmp / "certs", tmp / "out"
        # set explicitly so that a value in the shell cannot leak in
        self.env = dict(env or VARIANTS["warm"])
        subprocess.run([str(ROOT / "deploy/make_certs.sh"), str(self.certs), str(nodes(method))], check=True,
                       capture_output=True)  # fmt: skip
        self.port, self.control = free_ports(2)
        self.start_link()
        self.connect("op", f"127.0.0.1:{self.control}", str(self.certs / "ca.crt"))
        for k in range(nodes(method)):
            reg = self.cli("supernode", "register", str(self.certs / f"supernode_{k}.pub"), "op")
            if reg.returncode != 0:
                raise RuntimeError(f"registering node {k}: {reg.stdout} {reg.stderr}")
            self.start_node(k)
        self.wait_nodes()

    def start_link(self, name: str = "link") -> None:
        self.start(name, [str(ROOT / "deploy/superlink.sh"), "--tls", str(self.certs), "--host",
                          "127.0.0.1", "--port", str(self.port), "--control-port",
                          str(self.control), "--database", str(self.tmp / "state.db")],
                   env=self.env)  # fmt: skip
        wait_listening("127.0.0.1", self.port)
        wait_listening("127.0.0.1", self.control)

    def start_node(self, k: int, name: str = "") -> None:
        role = ["--role", ("alpha", "beta")[k]] if method_of(self.method) == "fedrl" else []
        if self.method in POLICY:
            role += ["--policy", POLICY[self.method]]
        self.start(
            name or f"sn{k}",
            [str(ROOT / "deploy/supernode.sh"), "--superlink", f"127.0.0.1:{self.port}",
             "--partition-id", str(k), "--num-partitions", str(nodes(self.method)), "--port", str(free_port()),
             "--tls", str(self.certs / "ca.crt"), "--key", str(self.certs / f"supernode_{k}"),
             *role],
            env={"XDG_STATE_HOME": str(self.tmp / f"node{k}-state"), **self.env},
        )  # fmt: skip

    def wait_nodes(self) -> None:
        wait_for(lambda: all("SuperNode ID" in self.log(n) for n in self.procs if n.startswith("sn")),
                 120, what="the nodes to join")  # fmt: skip

    def submit(self, rounds: int, extra: str = "") -> int:
        rc = (f'method="{method_of(self.method)}" num-clients={nodes(self.method)} num-server-rounds={rounds} '
              f'eval-every={rounds} seed=0 out-dir="{self.out}" {JOBS[self.method]} {extra}')  # fmt: skip
        started = self.cli("run", str(ROOT), "op", "--format", "json", "--run-config", rc)
        return json.loads(started.stdout)["run-id"]

    def finish(self, run_id: int) -> None:
        wait_for(lambda: self.status("op", run_id).startswith("finished"), 3600, every=5,
                 what="the deployed run")  # fmt: skip
        status = self.status("op", run_id)
        if status != "finished:completed":
            raise RuntimeError(f"{self.method} deployed: {status}; logs in {self.tmp}")


def summarize_run(method: str, engine: str, folder: Path, out: Path, imports: dict,
                  variant: str = "") -> dict:  # fmt: skip
    replies = sent_replies(folder)
    r, c = pd.read_csv(out / "rounds.csv"), audit_costs(replies)
    n = exchanges(method, out, replies)
    per_msg = (r.wall_s / n.clip(lower=1)).median()
    row = {
        "method": method,
        "engine": engine,
        "rounds": len(r),
        "messages_per_round": float(n.mean()),
        "round_s": round(float(r.wall_s.median()), 2),
        "message_s": round(float(per_msg), 3),
        "replies_costed": len(c),
    }
    for col in ("process_age_s", "handler_s", "rebuild_s", "work_s", "state_s", "save_s"):
        row[col] = round(float(c[col].median()), 4) if col in c and c[col].notna().any() else None
    if engine == "simulation":
        row["process_age_s"] = None  # Ray's long-lived worker: its age says nothing
    if engine == "deployment":
        row["imports_s"] = round(imports["all"], 3)
        # a warm child finds the parent's preloaded modules (deploy/warm_start.PRELOAD)
        row["our_imports_s"] = round(imports["ours-warm" if variant == "warm" else "ours"], 3)
        row["transport_s"] = round(per_msg - (row["process_age_s"] or 0) - row["handler_s"], 3)
    else:  # a long-lived worker: no process start or imports per message
        row["imports_s"] = row["our_imports_s"] = 0.0
        row["transport_s"] = round(per_msg - row["handler_s"], 3)
    row["ours_s"] = round(row["handler_s"] - (row["work_s"] or 0) + row["our_imports_s"], 3)
    return row


def measure(method: str, variants: list[str], rounds: int, work) -> list[dict]:
    """One method's rows: its simulated run, then each deployed variant, the ratios to the
    simulated message and round measured in the same call."""
    unwind_on_sigterm()  # a stopped study closes the federations it started
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    entry = ["flwr.clientapp", "clients.app", HANDLER[method]]
    imports = {"all": import_seconds(entry),
               "ours": import_seconds(entry[1:], after=("flwr.clientapp", "torch")),
               "ours-warm": import_seconds(entry[1:], after=warm_preload())}  # fmt: skip
    sim = simulated(method, rounds, work)
    rows = [summarize_run(method, "simulation", sim, sim, imports)]
    for variant in variants:
        dep = deployed(method, rounds, work, variant)
        rows.append(summarize_run(method, "deployment", dep, dep / "out", imports, variant))
        rows[-1]["polls"] = variant
        for key in ("message_s", "round_s"):
            rows[-1][f"{key}_ratio"] = round(rows[-1][key] / max(rows[0][key], 1e-9), 1)
        print(json.dumps([rows[0], rows[-1]], indent=1), flush=True)
    return rows


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell["method"] not in JOBS:
        raise ValueError(f"{where}: grid.method: {cell['method']!r} is not one of {list(JOBS)}")
    unknown = [v for v in cell["variants"] if v not in VARIANTS]
    if unknown or not cell["variants"]:
        raise ValueError(f"{where}: grid.variants: {unknown or '[]'}: a list of {list(VARIANTS)}")
    if cell["rounds"] < 1:
        raise ValueError(f"{where}: grid.rounds must be >= 1")
    if "text2action" in cell["method"] and not T2A_DATA.is_dir():
        raise ValueError(f"{where}: grid.method: {cell['method']!r} reads {T2A_DATA}: not there")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per method and engine already: the table is the runs."""
    return runs


SHOWN = {
    "method": "method",
    "engine": "engine",
    "polls": "polls",
    "messages_per_round": "messages / round",
    "round_s": "round (s)",
    "message_s": "message (s)",
    "process_age_s": "process start + imports + Flower's hand-over (s)",
    "imports_s": "imports (s)",
    "rebuild_s": "our rebuild (s)",
    "work_s": "work (s)",
    "handler_s": "our handler (s)",
    "ours_s": "our overhead: handler - work + our imports (s)",
    "transport_s": "Flower's transport (s)",
    "message_s_ratio": "message deployed / simulated",
}


def markdown(table: pd.DataFrame) -> str:
    t = table.reindex(columns=list(SHOWN)).astype(object).where(table.notna(), "")
    return pipe_table(list(SHOWN.values()), t.values.tolist())


def plot(runs: pd.DataFrame, png, command: str) -> None:
    """A message's wall time per method and engine, split into the process's start (deployed
    only), our handler and Flower's transport; the simulated message is the baseline."""
    methods = list(dict.fromkeys(runs["method"]))
    fig, axes = figures.subplots(1, len(methods), figsize=(3.2 * len(methods), 4), squeeze=False)
    parts = (("process_age_s", "process start + imports + hand-over"),
             ("handler_s", "our handler"), ("transport_s", "Flower's transport"))  # fmt: skip
    for ax, method in zip(axes[0], methods):
        g = runs[runs["method"] == method].reset_index(drop=True)
        labels = ["simulated" if e == "simulation" else p for e, p in zip(g.engine, g.polls)]
        bottom = np.zeros(len(g))
        for col, label in parts:
            part = g[col].fillna(0).to_numpy(float)
            ax.bar(labels, part, bottom=bottom, label=label, color=f"C{parts.index((col, label))}")
            bottom += part
        for k, total in enumerate(g["message_s"]):
            ax.text(k, total, f"{total:.2f} s", ha="center", va="bottom", fontsize=8)
        ax.set(title=f"{method} ({g.messages_per_round.iloc[0]:g} messages a round)",
               ylabel="a message (s)" if method == methods[0] else "")  # fmt: skip
        ax.tick_params(axis="x", labelsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(parts), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    figures.save(fig, png, command)
