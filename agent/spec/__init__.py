"""Workloads: the TOML spec and its checks, expressions, knobs, candidates, tolerances, seeded inputs and the reference, the speed-of-light floor."""
