// The keyed PRF, on its own: the worker's host side computes it too (prf in
// agent/worker/gpu_checks.py), and a CPU test (tests/test_keyed_prf.py) compiles this text
// as C++ to check that both agree.

typedef unsigned long long u64;

// A keyed pseudo-random function of a word's device address: SipHash-1-3 of one
// 8-byte message under a 128-bit key. Unlike ws_mix (a bijection anyone can invert),
// seeing some of its outputs tells nothing of the key or of the others, so a kernel
// that learns a few words of a stream below (by computing a few outputs honestly)
// cannot extend it; and since the message is the address, no two buffers share a
// stream (one could otherwise be copied from another, or XORed away).
__device__ __forceinline__ u64 ws_rotl(u64 x, int b) { return (x << b) | (x >> (64 - b)); }
#define WS_SIPROUND                                                               \
  v0 += v1; v1 = ws_rotl(v1, 13); v1 ^= v0; v0 = ws_rotl(v0, 32);                 \
  v2 += v3; v3 = ws_rotl(v3, 16); v3 ^= v2;                                       \
  v0 += v3; v3 = ws_rotl(v3, 21); v3 ^= v0;                                       \
  v2 += v1; v1 = ws_rotl(v1, 17); v1 ^= v2; v2 = ws_rotl(v2, 32);
__device__ u64 ws_prf(u64 k0, u64 k1, u64 m) {
  u64 v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
  u64 v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
  const u64 b = 8ull << 56;  // the final block: the message's length
  v3 ^= m; WS_SIPROUND; v0 ^= m;
  v3 ^= b; WS_SIPROUND; v0 ^= b;
  v2 ^= 0xff; WS_SIPROUND; WS_SIPROUND; WS_SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}
