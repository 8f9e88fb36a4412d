"""The loop graph's nodes (agent/loop/graph.py wires them), one module per stage of an attempt."""
