"""DeviceFacts: one record for a GPU's facts, stored as a dict (checkpoints, gpu.json, the
worker's pipe) and read back from older and partial dicts."""

from __future__ import annotations

import pickle

import pytest

from warpsmith.agent.runtime.device_facts import RUNNER_FACTS, DeviceFacts
from warpsmith.agent.worker.protocol import WorkerReady

H200 = DeviceFacts(ordinal=0, name="NVIDIA H200", uuid="GPU-1234", arch="sm_90", cc_major=9, cc_minor=0,
                   sm_count=132, driver_version=13000, total_memory=150_000_000_000, l2_bytes=60 << 20,
                   smem_per_block=49152, smem_per_block_optin=232448, smem_per_sm=233472, regs_per_block=65536,
                   regs_per_sm=65536, max_threads_per_block=1024, max_threads_per_sm=2048, warp_size=32,
                   sm_clock_khz=1980000, mem_clock_khz=3201000, mem_bus_bits=6144, peak_bandwidth_gbs=4917.3,
                   nvrtc="13.0", driver="13.0")


def test_stored_form_is_the_dict_facts_used_to_be():
    """to_dict: the runner's facts in dir() order, then nvrtc and driver, as the worker built them before."""
    stored = H200.to_dict()
    assert list(stored) == sorted(RUNNER_FACTS) + ["nvrtc", "driver"]
    assert stored["arch"] == "sm_90" and stored["total_memory"] == 150_000_000_000 and stored["driver"] == "13.0"
    assert DeviceFacts.from_dict(stored) == H200


def test_old_and_partial_dicts_read_back():
    """from_dict ignores keys it does not know and defaults the ones missing (a test double's few facts)."""
    facts = DeviceFacts.from_dict({"name": "EvaluatorDouble (no GPU)", "arch": "sm_90", "sm_count": 132,
                                   "a_fact_since_dropped": 7})
    assert (facts.name, facts.arch, facts.sm_count) == ("EvaluatorDouble (no GPU)", "sm_90", 132)
    assert facts.total_memory == 0 and facts.nvrtc == "" and facts.uuid == ""
    assert DeviceFacts.from_dict({}) == DeviceFacts()


def test_facts_are_frozen():
    """A record, not a dict: nothing changes a GPU's facts after they are read."""
    with pytest.raises(AttributeError):
        H200.arch = "sm_100"  # type: ignore[misc]


def test_worker_ready_carries_facts_as_a_plain_dict():
    """On the pipe WorkerReady's facts stay the plain dict (the wire format); the parent gets DeviceFacts back."""
    ready = WorkerReady(H200, (13, 0))
    state = ready.__reduce_ex__(pickle.HIGHEST_PROTOCOL)[2]
    assert type(state["facts"]) is dict and state["facts"] == H200.to_dict()
    back = pickle.loads(pickle.dumps(ready))
    assert back == ready and isinstance(back.facts, DeviceFacts)
