"""What a torch baseline leaves mapped in the worker's context once it is timed
(agent/worker/torch_baseline.py: release_cached_memory). PyTorch cannot run here: a
stand-in records the calls; the GPU side is the torch baselines' tests in test_gpu_baselines.py."""

from __future__ import annotations

from types import SimpleNamespace

from warpsmith.agent.worker.torch_baseline import TorchBaseline


def test_cublas_workspaces_go_back_to_the_cache_before_the_cache_is_unmapped():
    calls: list[str] = []
    torch = SimpleNamespace(_C=SimpleNamespace(_cuda_clearCublasWorkspaces=lambda: calls.append("workspaces")),
                            cuda=SimpleNamespace(empty_cache=lambda: calls.append("empty_cache")))
    TorchBaseline.release_cached_memory(SimpleNamespace(torch=torch))
    assert calls == ["workspaces", "empty_cache"]


def test_a_pytorch_without_the_internal_call_still_unmaps_its_cache():
    calls: list[str] = []
    torch = SimpleNamespace(_C=SimpleNamespace(), cuda=SimpleNamespace(empty_cache=lambda: calls.append("empty_cache")))
    TorchBaseline.release_cached_memory(SimpleNamespace(torch=torch))
    assert calls == ["empty_cache"]
