"""Shared fixtures. Real data lives in ../shared/data beside the project (CI has it too)."""

from __future__ import annotations

import sys
import traceback
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
UDACITY = SHARED_DATA / "driving" / "udacity_simulator_wyckliffe"
PYTHON = sys.executable

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Flower refuses to build a Message outside a run (flwr 1.41 checks a task identity); unit
# tests of handlers and strategies build messages directly, so give them a task identity.
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1


@pytest.fixture
def udacity_dir() -> Path:
    if not (UDACITY / "driving_log.csv").is_file():
        pytest.skip(f"real data not found at {UDACITY}")
    return UDACITY


def run_tokens_alive(token: str) -> list[int]:
    """Pids of processes started by a simulation.py run with this token."""
    from simulation import processes_with_token

    return processes_with_token(token)


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


@pytest.fixture(autouse=True)
def _no_thread_outlives_its_test():
    yield
    while InProcessGrid.open:
        InProcessGrid.open.pop().close()
