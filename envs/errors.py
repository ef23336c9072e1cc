"""One error type for bad input data, so the launcher can print it as one line and exit 2."""

from pathlib import Path

# what a reader who typed a ../shared path from the docs needs to know, in the one line they see
SHARED = (
    "real datasets are read from ../shared/data, a folder beside this checkout where a lab "
    "keeps the data it is licensed for (README.md); the embedded default data needs none"
)


class DataError(ValueError):
    """A data file or field is missing or malformed; the message names it."""


def missing(path: Path | str, what: str) -> DataError:
    """The error for a `what` (a folder, a map file) that is not at `path`: a path that does
    not exist says so, not what it lacks (a missing FedVLN folder said "no connectivity/
    folder"), and where real data is kept; one that holds something else says that."""
    if Path(path).exists():
        return DataError(f"{path}: not a {what}")
    return DataError(f"{path}: no such {what} ({SHARED})")
