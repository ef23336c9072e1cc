"""models/rng.owned: the global torch generator lent to one owner at a time."""

import threading
import time

import torch

from models.rng import owned


def test_an_owner_gets_exactly_the_seeded_stream_and_leaves_the_global_state_as_found():
    torch.manual_seed(0)
    expected = torch.rand(5)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    with owned(0):
        got = torch.rand(5)
        with owned():  # re-entrant: a module built inside the owner's block
            torch.rand(1)
    assert torch.equal(got, expected)
    assert torch.equal(torch.get_rng_state(), before)


def test_two_owners_in_threads_never_interleave_their_draws():
    """Each thread draws in steps with pauses (where another would cut in); both get the
    stream they would get alone."""

    def draws(seed):
        out = []
        with owned(seed):
            for _ in range(20):
                out.append(torch.rand(1).item())
                time.sleep(0.001)
        return out

    alone = {s: draws(s) for s in (1, 2)}
    got = {}
    threads = [threading.Thread(target=lambda s=s: got.update({s: draws(s)})) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone
