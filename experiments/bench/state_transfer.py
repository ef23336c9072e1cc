"""What carrying a party's state in `context.state` costs against a file on the node's disk.

    python -m experiments.bench.state_transfer [--mb 14] [--repeats 5]

Why (issue 63): Flower hands `context.state` from the SuperNode to each message's ClientApp
process and back. A FedRL party's replay, networks and key are 13-15 MB by round 200 of
Table 1; clients/state_store.put_arrays keeps them in a file instead. This times the two paths
for `--mb` of float32 arrays in this process: Flower's own serde out of one process and into the
next (RecordDict -> protobuf bytes -> RecordDict, twice: reply, then next message; the gRPC
hops are not counted) against writing and reading the .npz the way put_arrays/get_arrays do.
Prints the medians; no file is kept.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from flwr.app import RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict  # pylint: disable=E0611

from contracts.records import array_record, arrays_of


def through_context(arrays: dict[str, np.ndarray]) -> None:
    record = RecordDict({"party": array_record(arrays)})
    for _ in range(2):  # the ClientApp's reply to the SuperNode, then on to the next process
        proto = ProtoRecordDict()
        proto.ParseFromString(recorddict_to_proto(record).SerializeToString())
        record = recorddict_from_proto(proto)
    arrays_of(record["party"])


def through_file(arrays: dict[str, np.ndarray], path: Path) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getbuffer())
    with np.load(path, allow_pickle=False) as f:
        {k: f[k] for k in f.files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.bench.state_transfer", description=__doc__
    )
    ap.add_argument("--mb", type=float, default=14.0, help="megabytes of float32 state")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    if args.mb <= 0 or args.repeats < 1:
        ap.error("--mb must be > 0 and --repeats >= 1")
    rng = np.random.default_rng(0)
    per = int(args.mb * 1e6 / 4 / 10)
    arrays = {f"replay.{i}": rng.standard_normal(per).astype(np.float32) for i in range(10)}
    with tempfile.TemporaryDirectory() as d:
        paths = {
            "context.state (Flower's serde, both ways)": lambda: through_context(arrays),
            "file on the node's disk (write + read)": lambda: through_file(
                arrays, Path(d) / "p.npz"
            ),
        }
        for name, fn in paths.items():
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            print(f"{name}: median {1000 * np.median(times):.0f} ms of {args.repeats}")
    print(f"state: {sum(a.nbytes for a in arrays.values()) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
