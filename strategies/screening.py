"""Screening of client updates before aggregation.

An update is aggregated only if it carries exactly one ArrayRecord (Flower's aggregation would
average every ArrayRecord of a reply, so a second one would go in unscreened) with exactly the
arrays of the global model (same names, shapes and dtypes), every value is finite, no
ConfigRecord, and its example count is a positive number no larger than MAX_EXAMPLES (a forged
1e30 would make one client's update the global model).
Anything else is rejected with a reason, so one broken or malicious client cannot poison the
global model or abort the round.
"""

from __future__ import annotations

import io
import math
import re

import numpy as np
from flwr.app import Array, ArrayRecord, Message

from contracts.messages import CD_LOSS, NUM_EXAMPLES


def message_bytes(msg: Message) -> int:
    """Bytes of the arrays a message carries (counted from the serialized arrays themselves)."""
    return sum(rec.count_bytes() for rec in msg.content.array_records.values())


def decode(array: Array) -> np.ndarray:
    """The numpy array an Array carries, as a read-only view of its serialized bytes.

    Flower's `Array.numpy()` runs `np.load`, which copies every byte; the server only reads
    updates (screens, measures and averages them), so it reads the .npy header and views the
    data behind it. Anything but a plain .npy (another serialization, a Fortran-ordered or
    object array) goes through `Array.numpy()`."""
    data = array.data
    if array.stype != "numpy.ndarray":
        return array.numpy()
    buf = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(buf)
        read = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }[version]
        shape, fortran, dtype = read(buf)
    except (ValueError, KeyError):
        return array.numpy()  # np.load says what is wrong with it
    if fortran or dtype.hasobject:
        return array.numpy()
    count = math.prod(shape)
    if buf.tell() + count * dtype.itemsize != len(data):
        return array.numpy()
    return np.frombuffer(data, dtype=dtype, count=count, offset=buf.tell()).reshape(shape)


MAX_EXAMPLES = 10_000_000  # per client per round; far above any silo or house here

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def one_line(reason: str, limit: int = 240) -> str:
    """The gist of an error reason for a CSV cell: colour codes dropped, and of a multi-line
    traceback only its last line (the exception), cut to `limit` characters."""
    lines = [ln.strip() for ln in ANSI.sub("", str(reason)).splitlines() if ln.strip()]
    text = lines[-1] if lines else "(no reason given)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def screen_update(
    reply: Message,
    reference: ArrayRecord,
    *,
    array_key: str = "arrays",
    weight_key: str = NUM_EXAMPLES,
) -> tuple[str | None, dict | None]:
    """(None, the update's arrays) if the reply is fit to aggregate, else (why not, None).

    Each array is deserialized once, here: the norm bound and the aggregation reuse the
    returned numpy arrays (experiments/bench/round_overhead.py measures what that saves)."""
    decoded: dict[str, np.ndarray] = {}
    problem = _problem(reply, reference, array_key, weight_key, decoded)
    return problem, (decoded if problem is None else None)


def _problem(
    reply: Message, reference: ArrayRecord, array_key: str, weight_key: str, decoded: dict
) -> str | None:
    if reply.has_error():
        return f"failed: {one_line(reply.error.reason)}"
    content = reply.content
    if array_key not in content.array_records:
        return f"rejected: no ArrayRecord '{array_key}'"
    if len(content.array_records) != 1 or len(content.config_records):
        extra = sorted(set(content.array_records) - {array_key}) + sorted(content.config_records)
        return f"rejected: unexpected records {extra[:3]} (only '{array_key}' and metrics)"
    metrics = list(content.metric_records.values())
    if len(metrics) != 1 or weight_key not in metrics[0]:
        return f"rejected: no metric '{weight_key}'"
    n = metrics[0][weight_key]
    if not isinstance(n, (int, float)) or not np.isfinite(n) or not 0 < n <= MAX_EXAMPLES:
        return f"rejected: bad '{weight_key}' {n!r} (must be in (0, {MAX_EXAMPLES}])"
    arrays = content.array_records[array_key]
    if set(arrays.keys()) != set(reference.keys()):
        missing = sorted(set(reference.keys()) - set(arrays.keys()))[:3]
        extra = sorted(set(arrays.keys()) - set(reference.keys()))[:3]
        return f"rejected: array names differ (missing {missing}, unexpected {extra})"
    for name, ref in reference.items():
        a = arrays[name]
        if tuple(a.shape) != tuple(ref.shape) or a.dtype != ref.dtype:
            return (
                f"rejected: '{name}' is {a.dtype}{list(a.shape)}, "
                f"expected {ref.dtype}{list(ref.shape)}"
            )
        values = decoded[name] = decode(a)
        if values.shape != tuple(ref.shape) or values.dtype != np.dtype(ref.dtype):
            return (  # the bytes say otherwise than the array's own metadata
                f"rejected: '{name}' holds {values.dtype}{list(values.shape)} under metadata "
                f"{a.dtype}{list(a.shape)}"
            )
        if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
            return f"rejected: '{name}' has NaN/Inf"
    return None


SIGNALS = (CD_LOSS, "cd-grad-ratio", "pb-entropy")  # CDL clients' training diagnostics


def mean_signals(metrics: list[dict]) -> dict[str, float]:
    """Round means of the SIGNALS the accepted clients reported (finite values only), named as
    rounds.csv columns (cd_loss, cd_grad_ratio, pb_entropy)."""
    out = {}
    for key in SIGNALS:
        vals = [float(m[key]) for m in metrics if key in m and np.isfinite(float(m[key]))]
        if vals:
            out[key.replace("-", "_")] = float(np.mean(vals))
    return out
