"""The platform's benchmarks: speed, memory, reliability, deployment cost (one script per table or study)."""
