"""Nsight Compute: a candidate profiled in its own process, parsed into typed records and findings."""
