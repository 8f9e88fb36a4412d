"""Compilation touches nothing on the host: includes and options from allowlists,
NVRTC in its own process with a minimal environment, an empty directory and a time
limit (real NVRTC throughout; the crash is a real SIGSEGV sent to the real process)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from warpsmith.agent.runtime import compile_process as cp
from warpsmith.agent.runtime import native
from warpsmith.agent.runtime.cache_dir import cache_root
from warpsmith.agent.runtime.compile_policy import check_options, check_source
from warpsmith.agent.runtime.compiler import compile_kernel, header_dir

CANARY = "sk-canary-4f1d9c0e7b"
KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.f; }\n'
# 2-D template recursion: NVRTC inlines every path, seconds at 8x8, minutes at 12x12.
SLOW = """template <int A, int B> struct F { __device__ static float f(float x) { return F<A - 1, B>::f(x) * 1.0001f + F<A, B - 1>::f(x + A); } };
template <int B> struct F<0, B> { __device__ static float f(float x) { return x; } };
template <int A> struct F<A, 0> { __device__ static float f(float x) { return x + 1.f; } };
extern "C" __global__ void k(float* x) { x[0] = F<12, 12>::f(x[1]); }
"""


@pytest.fixture
def fresh_process(monkeypatch):
    """A compile process started after the canary key entered this process's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    headers = header_dir(native.nvrtc_version())
    # A pool of one, so every compile goes through the shared process this test watches
    # (an earlier test's compile-ahead may have started more processes in the shared pool).
    monkeypatch.setattr(cp, "_pool", cp.CompilePool(headers, 1))
    process = cp.compile_process(headers)
    process.close()
    yield process


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")} if root.exists() else set()


def _outputs(r) -> str:
    return " ".join(str(v) for v in (r.log, r.error, r.symbol, r.entry, r.arch, r.cubin, r.resources))


def test_child_environment_has_no_secret_and_an_empty_private_cwd(fresh_process):
    """The compile process's environ lacks the parent's API key; its cwd is its own empty directory."""
    r = compile_kernel(KERNEL, "k", "sm_90", use_cache=False)
    assert r.ok, r.log
    environ = Path(f"/proc/{fresh_process.pid}/environ").read_bytes()
    assert CANARY.encode() not in environ and b"OPENAI_API_KEY" not in environ
    assert os.readlink(f"/proc/{fresh_process.pid}/cwd") == fresh_process.workdir != os.getcwd()
    assert os.listdir(fresh_process.workdir) == []


def test_child_runs_below_the_parents_priority(fresh_process):
    """NVRTC gives way to the GPU worker and the loop: the child is niced once started."""
    from warpsmith.agent.runtime.compile_child import NICENESS
    assert compile_kernel(KERNEL, "k", "sm_90", use_cache=False).ok
    parent = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, fresh_process.pid) == min(19, parent + NICENESS)


@pytest.mark.parametrize("source", [
    '#include "/proc/self/environ"\n',
    "#include </proc/self/environ>\n",
    '#include "/etc/passwd"\n',
    '#include "../../../../etc/passwd"\n',
    "#include <../../../../../etc/passwd>\n",
    '#include "cuda_fp16.h"\n',  # an allowed header, but quoted: searched beside the source first
    "#define F </etc/passwd>\n#include F\n",  # computed
    "#include_next </etc/passwd>\n",
    '#import "/etc/passwd"\n',
    '#embed "/etc/passwd"\n',
    '%:include "/etc/passwd"\n',  # digraph
    '#  /* spaced */  include "/etc/passwd"\n',
    '#inc\\\nlude "/etc/pa\\\nsswd"\n',  # line splices
    '# /* a comment\n spanning lines */ include "/etc/passwd"\n',
    '// a line comment ending in a splice \\\n#include "/etc/passwd"\n',
    'const char* s = "/*"; \n#include "/etc/passwd"\n// */\n',
    "int a = 1'0; /* '\n#include \"/etc/passwd\"\n// */\n",  # digit separator, not a character literal
    '#if __has_include("/etc/passwd")\n#endif\n',
    "#if __has_include_next(<cuda_fp16.h>)\n#endif\n",
    '#define H __has_include\n#if H("/etc/passwd")\n#endif\n',
    '#define P(a, b) a##b\n#if P(__has_, include)("/etc/passwd")\n#endif\n',
    '#incl\\u0075de "/etc/passwd"\n',
    '#\rinclude "/etc/passwd"\n',  # a lone carriage return: a blank to NVRTC
    '%:\rinclude "/etc/passwd"\n',
    '# /*c*/ \r include "/proc/self/environ"\n',
    '#\x1binclude "/etc/passwd"\n',  # any other control character
    # an allowed header's computed include, its path spelt by the source's macros
    "#define execution_policy /.\n#define h /../../../../../../../../../../../../etc/passwd\n"
    "#include <cub/block/block_load.cuh>\n",
    "#define execution_policy /.\n#define h /../../../../../../../../../../../../etc/passwd\n"
    "#include <cub/warp/warp_load.cuh>\n",
])
def test_file_reading_sources_are_refused_before_nvrtc(fresh_process, source):
    """Every include/has_include trick is a SOURCE_REFUSED result with a line number; NVRTC never runs."""
    compile_kernel(KERNEL, "k", "sm_90", use_cache=False)  # the process is up: its start is not the attack's
    before = fresh_process.requests
    cache, work = _files(cache_root()), _files(Path(fresh_process.workdir))
    r = compile_kernel(source + KERNEL, "k", "sm_90", use_cache=True)
    assert not r.ok and r.error == "SOURCE_REFUSED" and "(line " in r.log and "\n" not in r.log
    assert fresh_process.requests == before
    assert CANARY not in _outputs(r) and "root:" not in _outputs(r)
    assert _files(cache_root()) == cache and _files(Path(fresh_process.workdir)) == work


@pytest.mark.parametrize("entry", [
    'k\n#include "/proc/self/stat"\n',  # NVRTC pastes a name expression into the program's text
    'k)\n#include "/etc/passwd"\n//',
    "k\n__device__ int zz = 3;\n",  # code that is not in the recorded source
    "k // comment",
    'k"',
    "k\\",
    "k" * 300,
])
def test_an_entry_that_is_not_a_name_is_refused_before_nvrtc(fresh_process, entry):
    """NVRTC pastes the entry into the program's text (nvrtcAddNameExpression): a newline in it would open
    source lines no scan sees, an #include of the session's /proc/<pid>/environ among them (the key would come
    back in the compile log). An entry that is not a name is ENTRY_REFUSED, one line; NVRTC never runs."""
    compile_kernel(KERNEL, "k", "sm_90", use_cache=False)
    before = fresh_process.requests
    r = compile_kernel(KERNEL, entry, "sm_90", use_cache=True)
    assert not r.ok and r.error == "ENTRY_REFUSED" and "\n" not in r.log
    assert fresh_process.requests == before
    assert CANARY not in _outputs(r) and "root:" not in r.log


def test_the_file_name_nvrtc_quotes_is_one_plain_token():
    """NVRTC quotes the file name (a candidate's name) in its messages: whatever the name held, one token."""
    r = compile_kernel(KERNEL.replace("1.f;", "1.f; undefined_thing;"), "k", "sm_90", use_cache=False,
                       filename='a.cu\n#include "/etc/passwd"\n')
    assert not r.ok and "a.cu__include__" in r.log and "\n#include" not in r.log


def test_a_log_quoting_a_host_file_is_withheld():
    """A caller that skipped the source scan (or a scan NVRTC reads differently): NVRTC opens
    the host file and its log quotes the file's lines; the compile process returns one line
    instead, naming neither the file's text nor its path."""
    from warpsmith.agent.runtime import native
    from warpsmith.agent.runtime.compile_child import compile_request, foreign_file
    native.nvrtc()  # loaded in this process, as the compile process loads it
    reply = compile_request(native.nvrtc_compile, {"source": '#include "/etc/passwd"\n' + KERNEL, "filename": "k.cu",
                                                   "entry": "k", "options": [], "arch": "sm_90"}, [])
    assert reply["ok"] is False and reply["error"] == "SOURCE_REFUSED", reply
    assert "root:" not in reply["log"] and "/etc/passwd" not in reply["log"] and "\n" not in reply["log"]
    assert foreign_file('k.cu(2): error: identifier "x" is undefined', "k.cu", []) == ""
    assert foreign_file('/h/cuda_fp16.hpp(9): warning #1: x\n', "k.cu", ["-I/h", "-I/h/cccl"]) == ""
    assert foreign_file('/h2/x.h(9): error: y', "k.cu", ["-I/h"]) == "/h2/x.h"
    # a quoted source line under a diagnostic is indented, whatever it holds
    assert foreign_file('k.cu(3): warning #177-D: variable "unused" was declared but never referenced\n'
                        '    int r = ok ? f(1): error_code; int unused = r;\n', "k.cu", []) == ""


def test_a_kernel_with_many_warnings_compiles():
    """A log past the bound is cut mid-line; the guard reads the whole log, not the cut one."""
    from warpsmith.agent.runtime import native
    from warpsmith.agent.runtime.compile_child import LOG_MAX, compile_request
    unused = "".join(f"  int unused{i} = {i};\n" for i in range(1500))
    source = 'extern "C" __global__ void k(float* y) {\n' + unused + '  y[threadIdx.x] = 1.f;\n}\n'
    native.nvrtc()
    reply = compile_request(native.nvrtc_compile, {"source": source, "filename": "k.cu", "entry": "k", "options": [],
                                                   "arch": "sm_90"}, [])
    assert reply["ok"] is True, reply["log"][-300:]
    assert len(reply["log"]) <= LOG_MAX + 200 and "left out" in reply["log"]


def test_the_compile_process_refuses_such_an_entry_itself():
    """A caller that skipped the policy: the compile process checks the entry before NVRTC."""
    from warpsmith.agent.runtime.compile_child import compile_request

    def nvrtc(*args):
        raise AssertionError("NVRTC ran")
    reply = compile_request(nvrtc, {"source": KERNEL, "filename": "k.cu", "entry": 'k\n#include "/etc/passwd"\n',
                                    "options": [], "arch": "sm_90"}, [])
    assert reply["ok"] is False and reply["error"] == "ENTRY_REFUSED"


@pytest.mark.parametrize("entry", ["k", "ns::k", "k<128>", "k<float, 4>", ""])
def test_names_and_template_instances_are_entries(entry):
    from warpsmith.agent.runtime.compile_policy import check_entry
    assert check_entry(entry) == ""


def test_a_templated_kernel_compiles_by_its_instance_name():
    source = "template <int N> __global__ void k(float* x) { x[threadIdx.x] = N; }\ntemplate __global__ void k<128>(float*);\n"
    r = compile_kernel(source, "k<128>", "sm_90", use_cache=False)
    assert r.ok, r.log


def test_the_source_scan_is_linear_and_the_source_has_a_size_limit():
    """A regular expression that rescans an unclosed comment from every '#' takes 5 s on "#/*" x 16000
    (48 000 characters), quadrupling with each doubling; _directives computes where each gap ends once per
    position. That input finds nothing; an include behind a chain of comments that themselves hold '#' is
    found from every one of them; a source past SOURCE_MAX is refused."""
    from warpsmith.agent.runtime.compile_policy import SOURCE_MAX, _directives
    assert list(_directives("#/*" * 20000)) == []
    chain = "#" + "/*#/**/" * 20000 + ' include "/etc/passwd"\n'
    found = list(_directives(chain))
    assert len(found) == 20001 and {name for _, name, _ in found} == {"include"} and found[0][0] == 0
    assert "only these headers" in check_source(chain)
    assert check_source("#  /* a */ /* b */ include <cuda_fp16.h>\n" + KERNEL) == ""
    big = KERNEL + "//" + "x" * SOURCE_MAX
    assert f"at most {SOURCE_MAX}" in check_source(big)


def test_allowed_headers_compile():
    """CUDA and CCCL headers from the set compile by <name>, through NVRTC's bundled headers."""
    src = ("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <mma.h>\n#include <cuda/std/cstdint>\n"
           "#include <cooperative_groups.h>\n"
           "#if __has_include(<cuda_fp8.h>)\n#include <cuda_fp8.h>\n#endif\n"
           'extern "C" __global__ void k(__half* x, cuda::std::int32_t n) {\n'
           "  auto block = cooperative_groups::this_thread_block();\n"
           "  if (block.thread_rank() < n) x[block.thread_rank()] = __float2half(1.f); }\n")
    r = compile_kernel(src, "k", "sm_90", ["-std=c++17"], use_cache=False)
    assert r.ok, r.log


def test_policy_keeps_ordinary_code():
    """Comments, strings, #define with arguments, #if on macros and #pragma unroll pass the scan."""
    src = ('// sum a tile /* not a comment start */\n#define IDX(r, c) ((r) * 32 + (c))\n#if BM > 32\n#endif\n'
           'const char* s = "#pragma";\n#pragma unroll\n' + KERNEL)
    assert check_source(src) == ""


@pytest.mark.parametrize("option", [
    "--time=leak.csv", "--fdevice-time-trace=trace.json", "-I/etc", "--include-path=/etc", "--pre-include=/etc/passwd",
    "-include", "--ptxas-options=-v", "-Xptxas", "--dopt=on", "-G", "--gpu-architecture=sm_80", "-rdc=true",
    "--dlink-time-opt", "--output=x", "-D_LIBCUDACXX_X=1", "-DH=__has_include", '-DS="x"', "-DA B", "-D",
    "-maxrregcount=100000", "--create-pch=x.pch", "--pch-dir=/tmp",
])
def test_other_options_are_refused_and_write_nothing(fresh_process, tmp_path, monkeypatch, option):
    """An option outside the allowlist is OPTION_REFUSED naming it; no file appears in cwd, cache or the process dir."""
    monkeypatch.chdir(tmp_path)
    compile_kernel(KERNEL, "k", "sm_90", use_cache=False)
    cache, work = _files(cache_root()), _files(Path(fresh_process.workdir))
    r = compile_kernel(KERNEL, "k", "sm_90", [option])
    assert not r.ok and r.error == "OPTION_REFUSED" and repr(option) in r.log
    assert list(tmp_path.iterdir()) == []
    assert _files(cache_root()) == cache and _files(Path(fresh_process.workdir)) == work


def test_allowed_options_compile():
    """Macros, register caps, line info, the standard, vectorisation, -restrict and exact math flags compile."""
    opts = ["-DBM=64", "-DFLAG", "-DMODE=fast", "-maxrregcount=64", "--maxrregcount=128", "-lineinfo",
            "--generate-line-info", "-std=c++20", "--extra-device-vectorization", "-restrict", "-fmad=false",
            "-ftz=false", "-prec-div=true", "-prec-sqrt=true"]
    assert check_options(opts) == ""
    r = compile_kernel(KERNEL, "k", "sm_90", opts, use_cache=False)
    assert r.ok, r.log


@pytest.mark.parametrize("option", ["--use_fast_math", "-ftz=true", "-prec-div=false", "-prec-sqrt=false"])
def test_fast_math_only_where_the_workload_allows_it(option):
    """Precision-lowering math flags are refused unless allow_fast_math; then they compile."""
    refused = compile_kernel(KERNEL, "k", "sm_90", [option], use_cache=False)
    assert not refused.ok and refused.error == "OPTION_REFUSED" and "allow_fast_math" in refused.log
    allowed = compile_kernel(KERNEL, "k", "sm_90", [option], use_cache=False, allow_fast_math=True)
    assert allowed.ok, allowed.log


def test_timeout_kills_the_process_and_the_next_compile_starts_a_fresh_one(fresh_process):
    """A compile past its limit is COMPILE_TIMEOUT (a result); the next compile gets a new process."""
    compile_kernel(KERNEL, "k", "sm_90", use_cache=False)
    first = fresh_process.pid
    t0 = time.monotonic()
    r = compile_kernel(SLOW, "k", "sm_90", use_cache=False, timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert not r.ok and r.error == "COMPILE_TIMEOUT" and "longer than 1 s" in r.log
    assert not Path(f"/proc/{first}").exists() or "zombie" in Path(f"/proc/{first}/status").read_text().lower()
    again = compile_kernel(KERNEL, "k", "sm_90", use_cache=False)
    assert again.ok and fresh_process.pid != first


def test_a_crashing_process_is_a_result(fresh_process):
    """A compile process that dies mid-compile (a real SIGSEGV) is COMPILE_CRASHED, naming the signal."""
    compile_kernel(KERNEL, "k", "sm_90", use_cache=False)
    first = fresh_process.pid
    threading.Timer(0.5, os.kill, (first, signal.SIGSEGV)).start()
    r = compile_kernel(SLOW, "k", "sm_90", use_cache=False)
    assert not r.ok and r.error == "COMPILE_CRASHED" and "SIGSEGV" in r.log
    assert compile_kernel(KERNEL, "k", "sm_90", use_cache=False).ok and fresh_process.pid != first


def test_the_process_exits_on_end_of_input(fresh_process):
    """Closing the pipe ends the process (it does not outlive its parent's interest) and removes its directory."""
    compile_kernel(KERNEL, "k", "sm_90", use_cache=False)
    proc, workdir = fresh_process._proc, fresh_process.workdir
    fresh_process.close()
    assert proc.returncode == 0 and not Path(workdir).exists()


def test_after_parallel_compiles_a_single_thread_uses_the_shared_process():
    """Two compiles at once take the shared process and a second one; once both are free, the next compile from
    one thread takes the shared process again (the one whose sandbox the tests above check), whatever finished last."""
    from warpsmith.agent.runtime.compile_process import CompilePool
    pool = CompilePool(header_dir(native.nvrtc_version()), 2)
    shared = cp.compile_process(header_dir(native.nvrtc_version()))
    first, second = pool._take(), pool._take()  # both busy: nothing is started until a compile is sent
    assert first is shared and second is not shared and pool.started == 2
    pool._idle += [first, second]  # the second finished last
    try:
        assert pool._take() is shared
    finally:
        second.close()


def test_the_session_leaves_no_key_in_its_environment_block_for_a_child_to_read(tmp_path):
    """Any process of the same user reads /proc/<pid>/environ of another: a child that runs written code (a
    compile, a drafted reference) could read the session's key there. warpsmith's main overwrites
    the secrets' values in that block first; os.environ and getenv keep them (the model client's key). Run in a
    fresh interpreter, the key given as the shell would give it."""
    import subprocess
    import sys
    script = tmp_path / "session.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "from warpsmith.agent.runtime.secrets import hide_environ_block\n"
        "print(sorted(hide_environ_block()))\n"
        "print(os.environ['OPENAI_API_KEY'])\n"
        "reader = 'import os; print(open(f\"/proc/{os.getppid()}/environ\", \"rb\").read())'\n"
        "print(subprocess.run([sys.executable, '-c', reader], capture_output=True, text=True).stdout)\n"
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.getenv.restype = ctypes.c_char_p\n"
        "print(libc.getenv(b'OPENAI_API_KEY').decode())\n")
    from warpsmith.agent.runtime.parent_watch import PACKAGE_ROOT  # the warpsmith this process imported
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(PACKAGE_ROOT),
           "OPENAI_API_KEY": CANARY, "HF_TOKEN": "hf-canary-77", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-P", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    hidden, kept, child, getenv = [line for line in out.stdout.split("\n") if line]
    assert hidden == "['HF_TOKEN', 'OPENAI_API_KEY']" and kept == CANARY
    assert CANARY not in child and "hf-canary-77" not in child and "OPENAI_API_KEY" in child
    assert getenv == CANARY  # C code in the process (Ray's token loader, say) still reads the value


def test_children_started_for_written_code_get_no_secrets(monkeypatch):
    from warpsmith.agent.runtime import parent_watch
    from warpsmith.agent.spec import reference_run
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", CANARY)
    for env in (parent_watch.child_env(), reference_run.child_env()):
        assert CANARY not in env.values() and "PATH" in env


def test_nvrtcs_log_is_bounded_before_it_leaves_the_compile_process():
    """A few-KB source of macros that double at each level: a warning per expansion, each echoing the line. At
    n = 18 the log is 262 MiB and the session's memory grows by 560 MiB; here n = 10
    (about 1000 warnings, real NVRTC) is enough to pass LOG_MAX, and what comes back is its head and tail."""
    from warpsmith.agent.runtime.compile_child import LOG_MAX
    n = 10
    source = ("#define A0 { int u; }\n" + "".join(f"#define A{i} A{i - 1} A{i - 1}\n" for i in range(1, n + 1))
              + f'extern "C" __global__ void k(int* out) {{ A{n} out[0] = 1; }} /*{"x" * 200}*/\n'
              + 'extern "C" __global__ void k2(int* out) { int* p = 1.5; }\n')
    r = compile_kernel(source, "k", "sm_90", use_cache=False)
    assert not r.ok and "of NVRTC's log left out" in r.log and len(r.log) < LOG_MAX + 200
    assert "warning" in r.log[:200] and "error" in r.log[-2000:]  # the head and the tail, where the error is
