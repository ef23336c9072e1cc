"""FedRL's tables and studies (one script per table or study).

Every study here runs in the named study mode `fedrl.reproducible-noise = true` (STUDY): the
parties' noise is drawn from the run seed, so a table repeats to the digit and a resumed or
cached run is the run it claims to be. That noise is NOT private (anyone with the run config
removes it: experiments/privacy/fedrl_derandomize.py); it measures utility at a noise level,
and the privacy a default run gets at that level is what its own secret noise gives.

Repeating to the digit also needs the same floating-point kernels on every host and engine
(training/numerics.py says why). Importing this package pins them before anything computes;
`numerics()` is recorded in every run row and its fingerprint, so runs made under other kernel
settings are never mixed or reused. The pin holds on one kind of host, not across kinds: a run
made on another kind of host differs within the seeds' spread (training/numerics.py).
"""

from training.numerics import numerics, pin

STUDY = {"fedrl.reproducible-noise": True}
pin()

__all__ = ["STUDY", "numerics"]
