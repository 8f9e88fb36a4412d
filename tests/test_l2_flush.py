"""The cold flush's kernels: they compile with NVRTC for every arch the runner targets and
carry the eviction-priority instructions that make them a flush hints cannot outlive."""

from __future__ import annotations

import pytest

from warpsmith.agent.runtime import compiler, l2_flush


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_flush_compiles_with_its_priority_instructions(arch):
    """Both entries build; the write carries an evict_last policy and the second pass
    returns lines to evict_normal (what Device::flush_l2 relies on)."""
    compiled = compiler.compile_kernel(l2_flush.SOURCE, "", arch, filename="warpsmith_l2_flush.cu")
    assert compiled.ok, compiled.log
    for entry in (b"warpsmith_l2_write", b"warpsmith_l2_demote"):
        assert entry in compiled.cubin
    assert "createpolicy.fractional.L2::evict_last" in l2_flush.SOURCE
    assert "applypriority.global.L2::evict_normal" in l2_flush.SOURCE
