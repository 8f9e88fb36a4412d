"""Does cuMemSetAccess(PROT_READ) make device memory read-only for kernels on this GPU?
Steps print what the driver answered; a kernel write to the read-only range should fault."""
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
def main(mode):
    cu.cuInit(0); dev = C.c_int(); cu.cuDeviceGet(C.byref(dev), 0)
    ctx = C.c_void_p(); cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev); cu.cuCtxSetCurrent(ctx)
    prop = Prop(); prop.type = 1; prop.location = Loc(1, 0)  # PINNED, DEVICE 0
    gran = C.c_size_t(); ck(cu.cuMemGetAllocationGranularity(C.byref(gran), C.byref(prop), 0), f"granularity {0}")
    size = gran.value
    h = C.c_ulonglong(); ck(cu.cuMemCreate(C.byref(h), C.c_size_t(size), C.byref(prop), C.c_ulonglong(0)), "cuMemCreate")
    va = C.c_ulonglong(); ck(cu.cuMemAddressReserve(C.byref(va), C.c_size_t(size), C.c_size_t(0), C.c_ulonglong(0), C.c_ulonglong(0)), "reserve")
    ck(cu.cuMemMap(C.c_ulonglong(va.value), C.c_size_t(size), C.c_size_t(0), h, C.c_ulonglong(0)), "map")
    ck(cu.cuMemSetAccess(C.c_ulonglong(va.value), C.c_size_t(size), C.byref(Access(Loc(1, 0), 3)), C.c_size_t(1)), "access RW")
    ck(cu.cuMemsetD32_v2(C.c_ulonglong(va.value), C.c_uint(7), C.c_size_t(size // 4)), "memset while RW")
    ck(cu.cuMemSetAccess(C.c_ulonglong(va.value), C.c_size_t(size), C.byref(Access(Loc(1, 0), 1)), C.c_size_t(1)), "access READ")
    flags = C.c_ulonglong(); ck(cu.cuMemGetAccess(C.byref(flags), C.byref(Loc(1, 0)), C.c_ulonglong(va.value)), f"get access")
    print(f"  access flags now {flags.value}")
    mod = C.c_void_p(); ck(cu.cuModuleLoadData(C.byref(mod), open(os.path.join(HERE, "ro_write_sm90.cubin"), "rb").read()), "load")
    out = C.c_ulonglong(); ck(cu.cuMemAlloc_v2(C.byref(out), C.c_size_t(64)), "alloc out")
    def launch(fname, *args):
        f = C.c_void_p(); cu.cuModuleGetFunction(C.byref(f), mod, fname)
        hs = [C.c_ulonglong(a) if i < 1 or fname == b"read_one" else C.c_uint(a) for i, a in enumerate(args)]
        ptrs = (C.c_void_p * len(hs))(*[C.cast(C.byref(x), C.c_void_p) for x in hs])
        return cu.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, ptrs, None)
    ck(launch(b"read_one", va.value, out.value), "kernel read of READ range")
    ck(cu.cuCtxSynchronize(), "sync after read", fatal=False)
    v = C.c_uint(); ck(cu.cuMemcpyDtoH_v2(C.byref(v), out, C.c_size_t(4)), f"dtoh"); print(f"  read {v.value} (7 expected)")
    if mode == "memset":
        ck(cu.cuMemsetD32_v2(C.c_ulonglong(va.value), C.c_uint(9), C.c_size_t(1)), "host memset of READ range", fatal=False)
        ck(cu.cuCtxSynchronize(), "sync after memset", fatal=False)
    if mode == "kernel":
        ck(launch(b"write_one", va.value, 9), "kernel write to READ range")
        ck(cu.cuCtxSynchronize(), "sync after kernel write (a fault expected)", fatal=False)
    if mode == "htod":
        x = C.c_uint(5); ck(cu.cuMemcpyHtoD_v2(C.c_ulonglong(va.value), C.byref(x), C.c_size_t(4)), "HtoD into READ range", fatal=False)
    ck(cu.cuMemSetAccess(C.c_ulonglong(va.value), C.c_size_t(size), C.byref(Access(Loc(1, 0), 3)), C.c_size_t(1)), "access RW again", fatal=False)
    ck(cu.cuMemcpyDtoH_v2(C.byref(v), C.c_ulonglong(va.value), C.c_size_t(4)), "dtoh", fatal=False); print(f"  word 0 now {v.value}")
if __name__ == "__main__":
    if len(sys.argv) > 1: main(sys.argv[1]); sys.exit(0)
    for mode in ("kernel", "memset", "htod"):
        print(f"== {mode}", flush=True)
        r = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, timeout=60); print(r.stdout + r.stderr[-2000:], flush=True)
