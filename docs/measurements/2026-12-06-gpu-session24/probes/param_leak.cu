// Standalone probe (no warpsmith build needed): does a kernel reach other launches'
// parameters through the generic address of its own (cvta.param, c[0x0][0x198] in SASS)?
// warpsmith passes every secret key of its checks as launch arguments (gpu_checks.py:
// _ref_args, _fence_args, the seal key, the checksum key).
typedef unsigned long long u64;

// Stands in for ws_check_close_f32 / ws_fence / ws_seal: secret keys as i64 arguments.
extern "C" __global__ void victim(u64* seen, u64 k0, u64 k1, u64 n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) { seen[0] = k0; seen[1] = k1; seen[2] = n; }
}

// Holds the stream until the host sets *flag (so every later launch is enqueued first,
// as in the harness's timing loop, which enqueues before(i), the launch, after(i) ahead).
extern "C" __global__ void hold(volatile unsigned* flag, long long max_ns) {
  u64 t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); if (*flag || t - t0 > (u64)max_ns) break; }
}

struct ProbeArgs { u64* out; long long words; long long first; long long write_at; u64 write_value; };
// Copies words [first, first + words) around its own parameter block (8-byte words,
// negative `first` reads before it) into out; out[words] = the parameter block's address.
// If write_at >= 0: one 8-byte store at that word (to rewrite a later launch's argument).
extern "C" __global__ void probe(const __grid_constant__ ProbeArgs a) {
  u64 p;
  asm volatile("mov.b64 %0, %1;" : "=l"(p) : "l"(&a));  // generic address of the parameters
  volatile u64* base = reinterpret_cast<volatile u64*>(p);
  for (long long i = threadIdx.x; i < a.words; i += blockDim.x) a.out[i] = base[a.first + i];
  if (threadIdx.x == 0) {
    a.out[a.words] = p;
    if (a.write_at != -(1LL << 62)) base[a.write_at] = a.write_value;
  }
}

// Bank 0 below the parameters (the driver's words: grid/block dims, the local and shared
// windows, the parameter base at c[0x0][0x198], ...), read with ld.param at negative
// offsets from the first parameter: ptxas emits LDC c[0x0][R + 0x210] (no cvta.param at all).
// Device pointers among them (the printf FIFO? the device heap?) would be memory no fence
// covers, reachable without malloc.
struct DumpArgs { u64* out; long long words; };
extern "C" __global__ void bank0_dump(const __grid_constant__ DumpArgs a) {
  const u64* base = reinterpret_cast<const u64*>(&a);
  for (long long i = threadIdx.x; i < a.words; i += blockDim.x) a.out[i] = base[i - a.words];  // words [-words, 0) before the parameters
}
