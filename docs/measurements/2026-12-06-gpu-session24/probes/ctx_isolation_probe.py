"""Two contexts of one process on one GPU: does a kernel of context A fault on memory
allocated in context B (cuMemAlloc), and can both reach a VMM mapping (cuMemCreate +
cuMemMap + cuMemSetAccess for the device)? Each question in its own child process."""
import ctypes as C, os, subprocess, sys
HERE = os.path.dirname(os.path.abspath(__file__))
cu = C.CDLL("libcuda.so.1")
def name(r):
    s = C.c_char_p(); cu.cuGetErrorName(r, C.byref(s)); return s.value.decode() if s.value else str(r)
def ck(r, what, fatal=True):
    print(f"  {what}: {name(r) if r else 'CUDA_SUCCESS'}", flush=True)
    if r and fatal: sys.exit(1)
    return r
class Loc(C.Structure): _fields_ = [("type", C.c_int), ("id", C.c_int)]
class Prop(C.Structure): _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("location", Loc),
                                     ("win32HandleMetaData", C.c_void_p), ("compressionType", C.c_ubyte),
                                     ("gpuDirectRDMACapable", C.c_ubyte), ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]
class Access(C.Structure): _fields_ = [("location", Loc), ("flags", C.c_int)]
def setup():
    ck(cu.cuInit(0), "init"); dev = C.c_int(); cu.cuDeviceGet(C.byref(dev), 0)
    a = C.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(C.byref(a), dev), "primary ctx A")
    b = C.c_void_p(); ck(cu.cuCtxCreate_v4(C.byref(b), None, C.c_uint(0), dev), "created ctx B")
    return dev, a, b
def module():
    mod = C.c_void_p(); ck(cu.cuModuleLoadData(C.byref(mod), open(os.path.join(HERE, "ro_write_sm90.cubin"), "rb").read()), "load")
    f = C.c_void_p(); cu.cuModuleGetFunction(C.byref(f), mod, b"read_one"); return f
def read(f, p, out):
    hs = [C.c_ulonglong(p), C.c_ulonglong(out)]
    ptrs = (C.c_void_p * 2)(*[C.cast(C.byref(x), C.c_void_p) for x in hs])
    ck(cu.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, ptrs, None), "launch read_one", fatal=False)
    r = ck(cu.cuCtxSynchronize(), "sync", fatal=False)
    if not r:
        v = C.c_uint(); cu.cuMemcpyDtoH_v2(C.byref(v), C.c_ulonglong(out), C.c_size_t(4)); print(f"  read {v.value:#x}")
def alloc(n):
    p = C.c_ulonglong(); ck(cu.cuMemAlloc_v2(C.byref(p), C.c_size_t(n)), "cuMemAlloc"); return p.value
def main(mode):
    dev, a, b = setup()
    if mode == "cross":
        cu.cuCtxSetCurrent(b); pb = alloc(1 << 21); ck(cu.cuMemsetD32_v2(C.c_ulonglong(pb), C.c_uint(0x1234), C.c_size_t(16)), "memset in B")
        print(f"  B's buffer at {pb:#x}")
        cu.cuCtxSetCurrent(a); f = module(); out = alloc(64); print(f"  A's buffer at {out:#x}")
        print("  A's kernel reads B's buffer (isolated: ILLEGAL_ADDRESS):"); read(f, pb, out)
    if mode == "vmm":
        cu.cuCtxSetCurrent(a)
        prop = Prop(); prop.type = 1; prop.location = Loc(1, dev.value)
        size = 2 << 20
        h = C.c_ulonglong(); ck(cu.cuMemCreate(C.byref(h), C.c_size_t(size), C.byref(prop), C.c_ulonglong(0)), "cuMemCreate")
        va = C.c_ulonglong(); ck(cu.cuMemAddressReserve(C.byref(va), C.c_size_t(size), C.c_size_t(0), C.c_ulonglong(0), C.c_ulonglong(0)), "reserve")
        ck(cu.cuMemMap(va, C.c_size_t(size), C.c_size_t(0), h, C.c_ulonglong(0)), "map")
        ck(cu.cuMemSetAccess(va, C.c_size_t(size), C.byref(Access(Loc(1, dev.value), 3)), C.c_size_t(1)), "access RW")
        ck(cu.cuMemsetD32_v2(va, C.c_uint(0x5678), C.c_size_t(16)), "memset in A")
        cu.cuCtxSetCurrent(b); f = module(); out = alloc(64)
        print("  B's kernel reads the VMM mapping made in A (shared: 0x5678):"); read(f, va.value, out)
if __name__ == "__main__":
    if len(sys.argv) > 1: main(sys.argv[1]); sys.exit(0)
    for mode in ("cross", "vmm"):
        print(f"== {mode}", flush=True)
        r = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, timeout=60); print(r.stdout + r.stderr[-1500:], flush=True)
