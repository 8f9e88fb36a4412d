"""Real NVRTC compiles (no GPU needed): success, failure with line numbers, the
resource report, knobs through -D, and the CUBIN cache."""

import pytest
from workload_factory import SGEMM

from warpsmith.agent.runtime import native
from warpsmith.agent.runtime.compiler import compile_kernel, parse_resources
from warpsmith.agent.spec.kernel_source import parse_knobs

BROKEN = """extern "C" __global__ void k(float* x) {
  int i = threadIdx.x;
  x[i] = undefined_name + 1.f;
}
"""


def test_nvrtc_loads_from_the_wheel_or_toolkit():
    """NVRTC 13.x loads without a GPU and reports its version."""
    assert native.nvrtc().endswith(".so.13") or "nvrtc" in native.nvrtc()
    assert native.nvrtc_version()[0] == 13


def test_compiles_sgemm_to_sm90_cubin_with_resources():
    """The tiled SGEMM compiles to an sm_90 CUBIN; ptxas reports its registers and shared memory."""
    r = compile_kernel((SGEMM / "tiled.cu").read_text(), "sgemm_tiled", "sm_90", use_cache=False)
    assert r.ok, r.log
    assert r.cubin[:4] == b"\x7fELF"
    assert r.symbol == "sgemm_tiled"
    assert 16 <= r.resources.registers <= 255
    assert r.resources.shared_bytes == 4 * (64 * 8 + 8 * 64)  # As[BK][BM] + Bs[BK][BN] at defaults
    assert r.resources.spill_stores == 0
    assert r.compile_ms > 0


def test_knob_define_changes_the_kernel():
    """-DBM=128 -DBN=128 doubles the shared-memory tiles ptxas reports."""
    src = (SGEMM / "tiled.cu").read_text()
    r = compile_kernel(src, "sgemm_tiled", "sm_90", ["-DBM=128", "-DBN=128"], use_cache=False)
    assert r.ok, r.log
    assert r.resources.shared_bytes == 4 * (128 * 8 + 8 * 128)


def test_compile_failure_returns_the_log_with_line_numbers():
    """A compile error is a result carrying NVRTC's error name and the log with file(line)."""
    r = compile_kernel(BROKEN, "k", "sm_90", filename="broken.cu", use_cache=False)
    assert not r.ok and r.error == "NVRTC_ERROR_COMPILATION"
    assert 'broken.cu(3): error: identifier "undefined_name" is undefined' in r.log
    assert r.cubin == b""


def test_an_entry_the_source_does_not_define_is_named_first():
    """NVRTC blames its own pasted-in name map for a missing entry; the log's first line names the entry."""
    r = compile_kernel(BROKEN.replace("undefined_name", "1.f"), "sgemm_main", "sm_90", filename="tiled.cu",
                       use_cache=False)
    assert not r.ok and r.error == "NVRTC_ERROR_COMPILATION"
    assert r.log.splitlines()[0] == ('tiled.cu: error: the entry "sgemm_main" is not defined: the source needs '
                                     'extern "C" __global__ void sgemm_main(...)')


def test_bad_option_is_a_result_not_a_crash():
    """An option outside the allowlist (-O3: not NVRTC's either) comes back as OPTION_REFUSED, naming it."""
    r = compile_kernel("extern \"C\" __global__ void k() {}", "k", "sm_90", ["-O3"], use_cache=False)
    assert not r.ok and r.error == "OPTION_REFUSED" and "'-O3'" in r.log


def test_cpp_entry_is_lowered():
    """A C++ (mangled) kernel resolves through its name expression."""
    src = "template <int N> __global__ void scale(float* x) { x[threadIdx.x] *= N; }\ntemplate __global__ void scale<3>(float*);\n"
    r = compile_kernel(src, "scale<3>", "sm_90", use_cache=False)
    assert r.ok, r.log
    assert r.symbol.startswith("_Z") and "scale" in r.symbol


def test_cache_hit_returns_the_same_cubin():
    """The second compile of the same source, options and arch comes from the cache."""
    import uuid
    src = (SGEMM / "naive.cu").read_text() + f"\n// {uuid.uuid4()}\n"  # never compiled before
    first = compile_kernel(src, "sgemm_naive", "sm_90")
    second = compile_kernel(src, "sgemm_naive", "sm_90")
    assert not first.cached and second.cached
    assert second.cubin == first.cubin and second.resources == first.resources
    third = compile_kernel(src, "sgemm_naive", "sm_90", ["-DUNUSED=1"])
    assert not third.cached


def test_one_configuration_is_one_cache_entry_whatever_the_order_of_its_knobs():
    """The tuner compiles a point ahead from one dict, an attempt's compile the proposal
    built from another: the same knob values must give the same options and cache key.
    On the H200 they did not (insertion order), and the attempt's compile ran NVRTC again."""
    import uuid

    from warpsmith.agent.spec.candidate import Candidate
    from warpsmith.agent.spec.workload import load_workload
    kernel = load_workload(SGEMM).kernels["tiled"]
    src = kernel.source() + f"\n// {uuid.uuid4()}\n"  # never compiled before
    ahead = Candidate.from_spec(kernel, {"BM": 64, "BN": 128, "TM": 8}, source=src)
    node = Candidate.from_spec(kernel, {"TM": 8, "BN": 128, "BM": 64}, source=src)
    assert ahead.compile_options() == node.compile_options()
    first = compile_kernel(ahead.source, ahead.entry, "sm_90", ahead.compile_options())
    second = compile_kernel(node.source, node.entry, "sm_90", node.compile_options())
    assert first.ok and not first.cached and second.cached


class _HeldNvrtc:
    """NVRTC itself (the real compile process), each call held until released: the first
    caller's compile stays under way while a second caller asks for the same configuration.
    `fail_first`: the first call raises instead (a stop, a lost remote worker)."""

    def __init__(self, fail_first: bool = False):
        import threading
        self.started, self.release, self.calls, self.fail_first = threading.Event(), threading.Event(), [], fail_first

    def __call__(self, *args):
        from warpsmith.agent.runtime.compiler import run_nvrtc
        self.calls.append(args)
        self.started.set()
        assert self.release.wait(60)
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("the first caller's compile broke")
        return run_nvrtc(*args)


def _race(src: str, entry: str, nvrtc: _HeldNvrtc, filenames=("first.cu", "second.cu")) -> dict:
    """Two callers compile `src`: the second asks while the first's compile is held, and is
    seen waiting on it before the hold is released. Their results (or errors), by name."""
    import threading
    import time

    from warpsmith.agent.runtime import compiler
    results: dict = {}

    def call(name, filename):
        try:
            results[name] = compile_kernel(src, entry, "sm_90", filename=filename, nvrtc=nvrtc)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            results[name] = e
    first = threading.Thread(target=call, args=("first", filenames[0]), daemon=True)
    second = threading.Thread(target=call, args=("second", filenames[1]), daemon=True)
    try:
        first.start()
        assert nvrtc.started.wait(60)
        second.start()
        deadline = time.monotonic() + 60
        # until the second is blocked in the first's result() (CPython's Future keeps its waiters there)
        while not any(f._condition._waiters for f in list(compiler._flights.values())):  # type: ignore[attr-defined]
            assert second.is_alive() and time.monotonic() < deadline, "the second caller never waited"
            second.join(0.01)
    finally:
        nvrtc.release.set()
        first.join(60)
        second.join(60)
    assert not compiler._flights  # nothing left behind
    return results


def test_a_configuration_under_way_is_compiled_once_and_its_result_shared():
    """The tuner's compile-ahead and the evaluator asking for the same configuration at
    once: one NVRTC run, both get its CUBIN; the one that waited reports the wait as its
    compile time, not as a cache hit."""
    import uuid
    src = (SGEMM / "naive.cu").read_text() + f"\n// {uuid.uuid4()}\n"  # never compiled before
    nvrtc = _HeldNvrtc()
    r = _race(src, "sgemm_naive", nvrtc)
    assert len(nvrtc.calls) == 1
    a, b = r["first"], r["second"]
    assert a.ok and b.ok and a.cubin == b.cubin and not a.cached and not b.cached
    assert compile_kernel(src, "sgemm_naive", "sm_90", nvrtc=nvrtc).cached and len(nvrtc.calls) == 1


def test_a_failure_is_not_shared_the_one_waiting_compiles_for_itself():
    """NVRTC's refusal of the first caller's request is that request's (its file name in the
    log): the caller that waited compiles its own and gets its own log."""
    import uuid
    src = f"extern \"C\" __global__ void k(float* x) {{ x[0] = undefined_{uuid.uuid4().hex}; }}\n"
    nvrtc = _HeldNvrtc()
    r = _race(src, "k", nvrtc)
    assert len(nvrtc.calls) == 2
    assert not r["first"].ok and "first.cu" in r["first"].log
    assert not r["second"].ok and "second.cu" in r["second"].log and "first.cu" not in r["second"].log


def test_an_error_in_the_other_callers_compile_is_not_the_waiters():
    """The first caller's compile raises (a stop, a lost remote worker): that caller gets
    the error, the one that waited compiles for itself and gets its CUBIN."""
    import uuid
    src = (SGEMM / "naive.cu").read_text() + f"\n// {uuid.uuid4()}\n"
    nvrtc = _HeldNvrtc(fail_first=True)
    r = _race(src, "sgemm_naive", nvrtc)
    assert isinstance(r["first"], RuntimeError) and r["second"].ok and len(nvrtc.calls) == 2


def test_waiting_for_another_callers_compile_keeps_the_waiters_own_time_limit():
    """A caller with a 0.2 s limit does not wait out another caller's longer compile."""
    import threading
    import uuid

    from warpsmith.agent.runtime import compiler
    src = (SGEMM / "naive.cu").read_text() + f"\n// {uuid.uuid4()}\n"
    nvrtc = _HeldNvrtc()
    first = threading.Thread(target=lambda: compile_kernel(src, "sgemm_naive", "sm_90", nvrtc=nvrtc), daemon=True)
    try:
        first.start()
        assert nvrtc.started.wait(60)
        r = compile_kernel(src, "sgemm_naive", "sm_90", timeout_s=0.2, nvrtc=nvrtc)  # the first is still held
        assert not r.ok and r.error == "COMPILE_TIMEOUT" and len(nvrtc.calls) == 1
    finally:
        nvrtc.release.set()
        first.join(60)
    assert not compiler._flights


def test_parse_resources_picks_the_entry():
    """With several functions in the log, the entry's own block is read."""
    log = ("ptxas info    : Compiling entry function 'other' for 'sm_90'\n"
           "ptxas info    : Used 99 registers, used 0 barriers\n"
           "ptxas info    : Compiling entry function 'mine' for 'sm_90'\n"
           "ptxas info    : Function properties for mine\n"
           "    24 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n")
    r = parse_resources(log, "mine")
    assert (r.registers, r.shared_bytes, r.stack_bytes, r.spill_stores, r.spill_loads) == (40, 2048, 24, 8, 4)


def test_knobs_are_parsed_with_values_and_defaults():
    """`// knob NAME: values` plus `#define NAME default` declare a knob."""
    knobs = parse_knobs((SGEMM / "tiled.cu").read_text())
    assert knobs["BM"].values == (32, 64, 128) and knobs["BM"].default == 64
    assert knobs["BK"].values == (8, 16, 32) and knobs["TN"].default == 8


def test_no_gpu_is_one_clear_error():
    """Opening a device without a driver raises CudaError with a name and what to do."""
    try:
        native.open_device(0)
    except native.CudaError as e:
        assert e.name in ("NO_DRIVER", "CUDA_ERROR_NO_DEVICE")
        assert "GPU" in str(e)
    else:
        pytest.skip("a GPU is present")


def test_an_nvrtc_without_bundled_headers_gets_its_toolkits_include_directory(tmp_path, monkeypatch):
    """NVRTC 13.0 (PyTorch's cu13 wheel) has no nvrtcInstallBundledHeaders: compiles get the
    include directory beside its lib directory, if it holds the 16-bit float headers."""
    from warpsmith.agent.runtime.compile_child import install_headers
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    lib, include = tmp_path / "cu13" / "lib", tmp_path / "cu13" / "include"
    lib.mkdir(parents=True)
    (lib / "libnvrtc.so.13").write_bytes(b"not a shared library")  # loading fails like a missing symbol would
    assert install_headers(str(lib / "libnvrtc.so.13"), str(tmp_path / "headers")) == []
    include.mkdir()
    for name in ("cuda_fp16.h", "cuda_bf16.h"):
        (include / name).write_text("// stand-in\n")
    assert install_headers(str(lib / "libnvrtc.so.13"), str(tmp_path / "headers")) == [f"-I{include}"]
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cu13"))
    (include / "cccl").mkdir()
    other = tmp_path / "elsewhere" / "lib"
    other.mkdir(parents=True)
    (other / "libnvrtc.so.13").write_bytes(b"")
    assert install_headers(str(other / "libnvrtc.so.13"), str(tmp_path / "h")) == [f"-I{include}", f"-I{include / 'cccl'}"]
