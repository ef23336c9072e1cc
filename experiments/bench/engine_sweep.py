"""What one poll of Flower's simulation engine costs, by nodes and stored messages (issue 65).

    python -m experiments.study experiments/studies/engine_sweep.toml

(the analysis of that study file, which sets the node counts, the stored messages and the
repeats). The engine hands messages to its workers by walking every registered node and, for
each, every message in the SuperLink's store (flwr/server/superlink/fleet/vce/vce_api.py
`add_messages_to_queue`, InMemoryLinkState.get_message_ins), every 0.1 s while the run lasts;
a message stays in the store until its reply is pulled, so a round pays this for its whole
length. Each run builds Flower's own in-memory LinkState with N nodes registered as the engine
registers them and P messages pushed through Flower's InMemoryGrid, and times one call of
Flower's own loop (CPU seconds, `repeats` times: the median is kept, least and largest beside):
the cost is Flower's, ∝ nodes x stored messages. The baseline is the same sweep with nothing
stored, measured in the same study; the figure draws the poll interval, 0.1 s, above which one
sweep takes more than the whole interval of a core. Each run also times what the engine does
once per node before it starts (`register_cpu_s_per_node`: it parses the app's pyproject.toml
per node), the start-up that 100,000 clients pay (docs/performance.md, Scale). Writes
experiments/results/engine_sweep.csv, every timing in engine_sweep_runs.csv, and the figure.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from queue import Queue

import pandas as pd

from experiments import figures
from experiments.simulate import ROOT, machine_label


class _Once(threading.Event):
    """A stop event whose first wait ends Flower's polling loop: exactly one sweep."""

    def wait(self, timeout=None):
        self.set()
        return True


def sweep_cpu_s(nodes: int, pending: int) -> float:
    """CPU seconds of one engine sweep over `nodes` nodes with `pending` stored messages."""
    from flwr.app import ConfigRecord, Message, MessageType, RecordDict
    from flwr.common.constant import RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID, TASK_ID_NUM_BYTES
    from flwr.proto.task_pb2 import Task  # pylint: disable=E0611
    from flwr.server.superlink.fleet.vce.vce_api import _register_nodes, add_messages_to_queue
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.server.superlink.linkstate.utils import generate_rand_int_from_bytes
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.grid import InMemoryGrid

    # as flwr/simulation/run_simulation.py sets up a run
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    run = Run.create_empty(run_id=generate_rand_int_from_bytes(RUN_ID_NUM_BYTES))
    run.primary_task_id = generate_rand_int_from_bytes(TASK_ID_NUM_BYTES)
    run.federation_id = NOOP_FEDERATION_ID
    TaskIdentity.task_id, TaskIdentity.run_id = 1, run.run_id
    TaskIdentity.node_id = SUPERLINK_NODE_ID
    state = factory.state()
    state.run_ids[run.run_id] = RunRecord(run=run)
    state.task_store[run.primary_task_id] = Task(task_id=run.primary_task_id, run_id=run.run_id)
    mapping = _register_nodes(nodes, factory)
    grid = InMemoryGrid(state_factory=factory)
    grid.set_run(run)
    to = list(mapping)[:pending]
    grid.push_messages(
        Message(RecordDict({"config": ConfigRecord({"ask": "identity"})}), dst_node_id=n,
                message_type=MessageType.QUERY)
        for n in to
    )  # fmt: skip
    queue: Queue = Queue()
    t0 = time.process_time()
    add_messages_to_queue(state, queue, mapping, _Once())
    spent = time.process_time() - t0
    if queue.qsize() != len(to):
        raise RuntimeError(f"the sweep handed out {queue.qsize()} of {len(to)} messages")
    return spent


REGISTER_SAMPLE = 1000  # nodes whose contexts are registered to time one node's


def register_cpu_s_per_node(nodes: int) -> float:
    """CPU seconds per node of what Flower's simulation engine does for every node before it
    starts (flwr/server/superlink/fleet/vce/vce_api.py `start_vce`): `_register_nodes`, and
    `_register_node_info_stores` with this app's directory, whose `register_context` reads and
    parses the app's pyproject.toml once per node (flwr/compat/client/run_info_store.py,
    `get_fused_config_from_dir`). Timed over min(nodes, REGISTER_SAMPLE) nodes: each node's
    cost is the same file parsed again, so the whole is this times the nodes."""
    from flwr.server.superlink.fleet.vce.vce_api import _register_node_info_stores, _register_nodes
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.superlink.federation import NoOpFederationManager

    n = min(nodes, REGISTER_SAMPLE)
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    t0 = time.process_time()
    mapping = _register_nodes(n, factory)
    _register_node_info_stores(mapping, Run.create_empty(run_id=1), app_dir=str(ROOT))
    return (time.process_time() - t0) / n


def one_run(nodes: int, pending: int, repeats: int) -> list[dict]:
    """`repeats` sweeps, each over a LinkState built afresh, and as many timings of a node's
    registration before the engine starts."""
    return [
        {
            "nodes": nodes,
            "pending": pending,
            "repeat": k,
            "sweep_cpu_s": sweep_cpu_s(nodes, pending),
            "register_cpu_s": register_cpu_s_per_node(nodes) * nodes,
        }
        for k in range(repeats)
    ]


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if not 0 <= cell["pending"] <= cell["nodes"] or cell["repeats"] < 1:
        raise ValueError(f"{where}: grid.pending in [0, nodes] and grid.repeats at least 1")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Median CPU seconds of a sweep per cell, least and largest beside, and its ratio to the
    sweep over as many nodes with nothing stored (the baseline of the same study); the median
    CPU seconds of registering that many nodes before the engine starts, least and largest
    beside."""
    df = (
        runs.groupby(["nodes", "pending"])
        .agg(
            sweep_cpu_s=("sweep_cpu_s", "median"),
            least=("sweep_cpu_s", "min"),
            largest=("sweep_cpu_s", "max"),
            repeats=("sweep_cpu_s", "size"),
            register_cpu_s=("register_cpu_s", "median"),
            register_least=("register_cpu_s", "min"),
            register_largest=("register_cpu_s", "max"),
        )
        .reset_index()
    )
    empty = df[df.pending == 0].set_index("nodes").sweep_cpu_s
    df["ratio_to_nothing_stored"] = df.sweep_cpu_s / df.nodes.map(empty)
    df["machine"] = machine_label()
    return df.round(4)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    """CPU seconds of one sweep against nodes, one line per count of stored messages (every
    repeat a dot), beside the poll interval it is repeated at."""
    fig, ax = figures.subplots(figsize=(6, 4))
    for pending, g in runs.groupby("pending"):
        med = g.groupby("nodes").sweep_cpu_s.median()
        label = "nothing stored (baseline)" if pending == 0 else f"{pending} messages stored"
        (line,) = ax.plot(med.index, med.clip(lower=1e-5), "o-", label=label)
        ax.plot(g.nodes, g.sweep_cpu_s.clip(lower=1e-5), ".", color=line.get_color(), alpha=0.5)
    ax.axhline(0.1, color="grey", ls="--", label="the engine's poll interval, 0.1 s")
    ax.set(xscale="log", yscale="log", xlabel="registered nodes",
           ylabel="CPU s of one sweep (add_messages_to_queue)",
           title="One poll of Flower's simulation engine (flwr 1.41)")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)
