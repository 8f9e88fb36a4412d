"""Run on a GPU machine: python3 l2_persist_probe.py  (needs libcuda.so.1, l2_persist_sm90.cubin)
Times read_sum over a buffer of ~0.6 x L2 after warpsmith's flush (a 32-bit memset over
max(2 x L2, 64 MiB)), when the previous launch read it with evict_last vs without.
A clearly shorter time after evict_last = its lines outlived the flush."""
import ctypes as C, os
cu = C.CDLL("libcuda.so.1")
def ck(r, w):
    if r: raise SystemExit(f"{w}: error {r}")
ck(cu.cuInit(0), "init"); dev = C.c_int(); ck(cu.cuDeviceGet(C.byref(dev), 0), "dev")
ctx = C.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "ctx"); ck(cu.cuCtxSetCurrent(ctx), "cur")
l2 = C.c_int(); ck(cu.cuDeviceGetAttribute(C.byref(l2), 38, dev), "l2")  # CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
sms = C.c_int(); ck(cu.cuDeviceGetAttribute(C.byref(sms), 16, dev), "sms")
mod = C.c_void_p(); ck(cu.cuModuleLoadData(C.byref(mod), open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "l2_persist_sm90.cubin"), "rb").read()), "load")
fn = C.c_void_p(); ck(cu.cuModuleGetFunction(C.byref(fn), mod, b"read_sum"), "fn")
stream = C.c_void_p(); ck(cu.cuStreamCreate(C.byref(stream), 0), "stream")
def alloc(n):
    p = C.c_uint64(); ck(cu.cuMemAlloc_v2(C.byref(p), C.c_size_t(n)), "alloc"); return p
nbytes = int(0.6 * l2.value) // 16 * 16
flush_bytes = max(2 * l2.value, 64 << 20)
x, out, flush = alloc(nbytes), alloc(64), alloc(flush_bytes)
ck(cu.cuMemsetD32_v2(x, 0x3f800000, nbytes // 4), "init x")
ev = [C.c_void_p() for _ in range(2)]
for e in ev: ck(cu.cuEventCreate(C.byref(e), 0), "event")
def launch(evict_last):
    a = [C.c_uint64(x.value), C.c_uint64(nbytes // 16), C.c_uint64(out.value), C.c_int(evict_last)]
    ptrs = (C.c_void_p * 4)(*[C.cast(C.byref(v), C.c_void_p) for v in a])
    ck(cu.cuLaunchKernel(fn, sms.value * 4, 1, 1, 256, 1, 1, 0, stream, ptrs, None), "launch")
def trial(prev_evict_last, value):
    launch(prev_evict_last)                                                    # the previous timed launch
    ck(cu.cuMemsetD32Async(flush, value, flush_bytes // 4, stream), "flush")  # warpsmith's cold flush
    ck(cu.cuEventRecord(ev[0], stream), "rec"); launch(0); ck(cu.cuEventRecord(ev[1], stream), "rec")
    ck(cu.cuStreamSynchronize(stream), "sync")
    ms = C.c_float(); ck(cu.cuEventElapsedTime(C.byref(ms), ev[0], ev[1]), "elapsed"); return ms.value
for mode in (0, 1, 0, 1):
    ts = sorted(trial(mode, 1000 * mode + k) for k in range(50))
    print(f"previous launch evict_last={mode}: median {ts[25]*1e3:.1f} us over {nbytes >> 20} MiB (L2 {l2.value >> 20} MiB)")
