"""The deployment harness for tests (experiments/bench/loopback.py), and the mark for tests that need
the edge."""

import shutil

import pytest

from experiments.bench.loopback import (  # noqa: F401 - the tests import these from here
    BIN,
    ENV,
    Federation,
    free_port,
    free_ports,
    rounds_done,
    wait_for,
    wait_listening,
)

# deploy/superlink.sh puts HAProxy at the edge; setup.sh installs it where it can (root + apt)
NEEDS_EDGE = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy not installed (apt-get install haproxy)"
)
