"""warpsmith: workloads, evaluation, the agent loop and the CLI."""
__version__ = "0.1.0"
