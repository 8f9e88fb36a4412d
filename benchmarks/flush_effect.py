"""What the L2 flush before a timed launch costs the launch it precedes. Times a plain
16-byte copy (the probe of the copy ceiling) at several sizes with CUDA events around
the copy alone, after each of three preparations:

- memset: a write over twice the L2 (what the runner does, as nvbench and Triton's
  do_bench do), which leaves the L2 full of dirty lines of its own;
- read: a read over twice the L2 of other data, which writes back whatever was dirty
  before the timed launch starts and leaves only clean lines;
- none: no flush (hot), for reference.

If the memset's write-back lands inside the timed copy, the copy's bandwidth after a
memset falls short of the read's by about L2 / (bytes moved), most at small sizes. The
runner keeps the write: a kernel that writes about an L2 of output then pays about the
write-back it leaves behind, as in a stream of kernels run back to back, where after a
read flush it would pay nothing for its last L2 of writes. The cost is a kernel that
writes little (rowsum), whose % of the floor reads low by up to L2 / bytes moved.
Needs CuPy and a GPU; independent of warpsmith's runner (its own kernels and events).

    python3 benchmarks/flush_effect.py [--reps 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys

COPY = r"""
extern "C" __global__ void copy16(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        d[i] = s[i];
}
extern "C" __global__ void read16(const uint4* __restrict__ s, long long n, unsigned* sink) {
    unsigned acc = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        uint4 v = s[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}
"""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args(argv)
    import cupy as cp
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    l2, sms = props["l2CacheSize"], props["multiProcessorCount"]
    mod = cp.RawModule(code=COPY, options=("-std=c++17",))
    copy16, read16 = mod.get_function("copy16"), mod.get_function("read16")
    flush_bytes = max(2 * l2, 64 << 20)
    flush = cp.full(flush_bytes // 4, 0x5A5A5A5A, dtype=cp.uint32)
    sink = cp.zeros(4, dtype=cp.uint32)
    blocks = sms * 8
    value = [0]

    def memset_flush():
        value[0] += 1
        flush.fill(value[0])

    def read_flush():
        read16((blocks,), (256,), (flush, cp.int64(flush_bytes // 16), sink))

    preps = {"memset": memset_flush, "read": read_flush, "none": lambda: None}
    print(f"GPU {props['name'].decode()}, L2 {l2 / 2**20:.0f} MiB, flush buffer {flush_bytes / 2**20:.0f} MiB, "
          f"{args.reps} timed copies per cell (median)")
    print("copy (read + written) | memset GB/s | read GB/s | none GB/s | memset / read")
    for mib in (64, 134, 268, 512, 1024, 2048):
        n = mib * 2**20 // 16
        src, dst = cp.ones(n * 4, dtype=cp.float32), cp.empty(n * 4, dtype=cp.float32)
        row = {}
        for name, prep in preps.items():
            times = []
            for i in range(args.reps + 3):
                prep()
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                copy16((blocks,), (512,), (src, dst, cp.int64(n)))
                b.record()
                b.synchronize()
                if i >= 3:
                    times.append(cp.cuda.get_elapsed_time(a, b))
            row[name] = 2 * n * 16 / (statistics.median(times) * 1e-3) / 1e9
        print(f"{mib} MiB + {mib} MiB | {row['memset']:.0f} | {row['read']:.0f} | {row['none']:.0f} | "
              f"{row['memset'] / row['read']:.3f}")
        del src, dst
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
