"""What one poll of Flower's simulation engine costs, by nodes and stored messages (issue 65).

    python -m experiments.bench.engine_sweep [--nodes 1000 10000 100000] [--pending 0 20]

The engine hands messages to its workers by walking every registered node and, for each,
every message in the SuperLink's store (flwr/server/superlink/fleet/vce/vce_api.py
`add_messages_to_queue`, InMemoryLinkState.get_message_ins), every 0.1 s while the run lasts;
a message stays in the store until its reply is pulled, so a round pays this for its whole
length. This builds Flower's own in-memory LinkState with N nodes registered as the engine
registers them and P messages pushed through Flower's InMemoryGrid, and times one call of
Flower's own loop (CPU seconds): the cost is Flower's, ∝ nodes x stored messages. Writes
experiments/results/engine_sweep.csv.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from queue import Queue

import pandas as pd

from experiments.simulate import RESULTS, command_line, machine_label


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--pending", type=int, nargs="+", default=[0, 20])
    args = ap.parse_args(argv)
    if min(args.nodes) < max(args.pending) or min(args.pending) < 0:
        print("engine_sweep: --pending must be in [0, min(--nodes)]", file=sys.stderr)
        return 2
    rows = [
        {"nodes": n, "pending": p, "sweep_cpu_s": round(sweep_cpu_s(n, p), 3)}
        for n in args.nodes
        for p in args.pending
    ]
    df = pd.DataFrame(rows)
    df["machine"] = machine_label()
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "engine_sweep.csv", index=False)
    print(f"{command_line(__file__, argv)}\n" + df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
