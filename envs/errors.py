"""One error type for bad input data, so the launcher can print it as one line and exit 2."""


class DataError(ValueError):
    """A data file or field is missing or malformed; the message names it."""
