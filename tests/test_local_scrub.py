"""The local-memory scrub on the CPU, with real NVRTC: its frame is local memory at every
size the worker asks for (a ptxas that kept it in registers would scrub nothing), and the
worker sizes it to a thread's whole local window, not only the kernel's own frame."""

import re

import pytest

from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.worker.gpu_checks import LOCAL_SCRUB_SOURCE, GpuChecks


@pytest.mark.parametrize("words", [64, 256, 1024])
def test_the_scrub_frame_is_local_memory_of_the_size_asked(words):
    r = compile_kernel(LOCAL_SCRUB_SOURCE, "ws_scrub_local", "sm_90", [f"-DWS_LOCAL_WORDS={words}"],
                       filename="warpsmith_scrub_local.cu", use_cache=False)
    assert r.ok, r.log
    assert r.resources.stack_bytes >= 4 * words, r.log


class _Facts:
    max_threads_per_sm = 2048


class _Function:
    def __init__(self, local_bytes):
        self.info = type("Info", (), {"local_bytes": local_bytes})()


class DeviceDouble:
    """Stands in for the GPU: records which scrub frame the worker loads."""
    facts = _Facts()

    def __init__(self, shrink=0):
        self.loaded, self.shrink, self.stack = [], shrink, 1024

    def stack_limit(self):
        return self.stack

    def load_module(self, cubin):
        device = self

        class Module:
            def function(self, symbol):
                words = int(re.search(rb"WS_LOCAL_WORDS=(\d+)", cubin).group(1))
                device.loaded.append(words)
                return _Function(max(0, 4 * words - device.shrink))
        return Module()


def _checks(device):
    checks = GpuChecks.__new__(GpuChecks)  # the scrub's own state only: no checker module on this machine
    checks.device, checks.arch, checks._local_scrubs, checks._window = device, "sm_90", {}, 0
    return checks


def test_the_scrub_covers_the_stack_when_the_frame_is_smaller(monkeypatch):
    """A kernel with a 16-byte frame (or none) gets the whole 1 KB window scrubbed; a larger frame, all of it."""
    from warpsmith.agent.worker import gpu_checks
    compiled_words = []

    def compile_double(source, entry, arch, options, filename):
        words = int(options[0].split("=")[1])
        compiled_words.append(words)
        return type("Compiled", (), {"ok": True, "cubin": f"WS_LOCAL_WORDS={words}".encode(), "symbol": entry})()

    monkeypatch.setattr(gpu_checks.compiler, "compile_kernel", compile_double)
    device = DeviceDouble()
    checks = _checks(device)
    for frame in (0, 16, 1024):
        checks.local_scrub(frame)
    checks.local_scrub(5000)
    assert compiled_words == [256, 1280]  # 1 KB for every frame up to the stack; 5000 B rounds up to 5120
    checks.local_scrub(16)  # never less than before: the window a 5000-byte frame made is still reachable
    device.stack = 8192  # the driver raised the stack for some launch (it never lowers it)
    checks.local_scrub(16)
    assert compiled_words == [256, 1280, 2048]


def test_a_scrub_whose_frame_came_out_short_is_refused(monkeypatch):
    from warpsmith.agent.worker import gpu_checks
    monkeypatch.setattr(gpu_checks.compiler, "compile_kernel", lambda source, entry, arch, options, filename: type(
        "Compiled", (), {"ok": True, "cubin": options[0].encode(), "symbol": entry})())
    with pytest.raises(RuntimeError, match="kept it out of local memory"):
        _checks(DeviceDouble(shrink=4)).local_scrub(16)
