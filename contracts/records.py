"""How named numpy arrays travel in Flower's records (both sides of FedRL build them)."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord


def array_record(arrays: dict) -> ArrayRecord:
    """numpy arrays -> ArrayRecord (None values are left out)."""
    return ArrayRecord(
        {k: Array(np.ascontiguousarray(v)) for k, v in arrays.items() if v is not None}
    )


def arrays_of(record: ArrayRecord | None) -> dict[str, np.ndarray]:
    """ArrayRecord -> numpy arrays ({} for None)."""
    return {} if record is None else {k: v.numpy() for k, v in record.items()}
