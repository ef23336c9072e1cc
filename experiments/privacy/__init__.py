"""Privacy: what each release costs and reveals (one script per table or study)."""
