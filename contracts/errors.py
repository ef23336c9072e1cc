"""Errors both sides of a run name (Flower-free, so the orchestrators can raise them)."""


class FederationError(RuntimeError):
    """The federation does not have the nodes the run needs, or a party broke the protocol."""
