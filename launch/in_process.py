"""A Flower Grid that runs every node's ClientApp in this process, without Ray or sockets.

Why: the tests drive whole strategies and runners through it (each message and reply kept, so
a test can check exactly what left a party), and benchmarks time a round's orchestration with
no engine around it (experiments/bench/round_overhead.py). Flower's own engines are what users run;
this is the instrument beside them.
"""

from __future__ import annotations

import traceback
import uuid


def task_identity() -> None:
    """Flower 1.41 refuses to build a Message outside a run (it checks a task identity); a grid
    in this process is a run of its own, so it gives one (1), unless one is set."""
    from flwr.supercore.task_identity import TaskIdentity

    try:
        TaskIdentity.run_id  # noqa: B018  (raises RuntimeError when not set)
    except RuntimeError:
        TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1


class InProcessGrid:
    """A Grid that delivers each message to the ClientApp of its node in this process, so
    whole strategies run without Ray; it keeps every message sent and every reply. A ClientApp
    that raises answers with an error reply carrying the traceback, as Flower's engines do.
    A call still running when the server moved on (a hang) is waited for when the test ends
    (`close`, by the autouse fixture below): no thread outlives the test that started it."""

    open: list[InProcessGrid] = []

    def __init__(
        self,
        app,
        run_config: dict,
        num_nodes: int,
        node_config_extra=None,
        concurrent: bool = False,
    ):
        from flwr.app import Context, RecordDict

        task_identity()
        self.app = app
        self.concurrent = concurrent  # deliver at once and honour `timeout` (hang tests)
        self.contexts = {
            5000 + p: Context(
                run_id=1,
                node_id=5000 + p,
                node_config={
                    "partition-id": p,
                    "num-partitions": num_nodes,
                    **(node_config_extra or {}),
                },
                state=RecordDict(),
                run_config=run_config,
            )
            for p in range(num_nodes)
        }
        self.sent, self.replies = [], []
        self.pools = []
        InProcessGrid.open.append(self)

    def close(self) -> None:
        for pool in self.pools:
            pool.shutdown(wait=True)
        self.pools.clear()

    def get_node_ids(self):
        return list(self.contexts)

    def _deliver(self, msg):
        try:
            return self.app(msg, self.contexts[msg.metadata.dst_node_id])
        except Exception:  # as Flower does: a ClientApp that raises sends an error reply
            from flwr.app import Error, Message

            return Message(Error(code=0, reason=traceback.format_exc()), reply_to=msg)

    def send_and_receive(self, messages, timeout=None):
        messages = list(messages)
        for msg in messages:  # ids as Flower's grids set them on push (replies refer to them)
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            self.sent.append(msg)
        if not self.concurrent:
            out = [self._deliver(m) for m in messages]
        else:  # a reply that misses the timeout is lost, as with Flower's grids
            from concurrent.futures import ThreadPoolExecutor, wait

            pool = ThreadPoolExecutor(max_workers=len(messages))
            futures = [pool.submit(self._deliver, m) for m in messages]
            wait(futures, timeout=timeout)
            pool.shutdown(wait=False)
            self.pools.append(pool)
            out = [f.result() for f in futures if f.done()]
        self.replies.extend(out)
        return out
