"""The ServerApp: reads the run config, runs the method, records results."""
