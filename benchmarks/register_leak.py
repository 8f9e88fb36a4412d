"""Whether the checks' keys reach a later kernel through its uniform registers. A kernel can
read registers it never wrote (a `.reg` declared in inline PTX and used unset compiles to
reads of uniform registers such as UR6-UR30), no scrub writes them all, and ptxas puts a
kernel's arguments and what it computes from them alone into uniform registers. So the
checker kernels take no key as an argument: they load it from the key page per thread
(agent/worker/cuda/checks.cu, ws_key_word). Two writers, each then the reader:

- control: a kernel computing the same PRF from a key passed as arguments (the form the
  checker kernels must not have): shows the channel is there on this GPU;
- checks: the mask kernel of a reference's upload (GpuChecks.upload_reference, ws_mask64).

Each three ways: the reader in the same context; the same with the harness's scrub
(GpuChecks.scrub) between them; the writer in a second process (its own CUDA context, as
the judge process has). Counted: the key words the reader stored, over `--launches`
rounds. A word counts when it is a 32-bit half of a key or of a key XORed with SipHash's
constants (what the PRF computes first). The checks' rows should read 0.

    python3 benchmarks/register_leak.py [--launches 5]

Needs a GPU.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
from multiprocessing.connection import Connection

import numpy as np

from warpsmith.agent.runtime import compiler, native
from warpsmith.agent.worker.gpu_checks import PRF_SOURCE, GpuChecks

SIPHASH = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)
WORDS = 12  # 64-bit values the reader takes from registers it never wrote
# Each thread stores WORDS values it read from registers no instruction wrote (the xor with
# a zero argument keeps them; ptxas allocates uniform registers for them).
READER = ('extern "C" __global__ void read(unsigned long long* out, unsigned long long zero) {\n'
          f'  unsigned long long v[{WORDS}];\n'
          '  asm("{.reg .b64 u<' + str(WORDS) + '>;' + "".join(f"xor.b64 %{i}, u{i}, %{WORDS};" for i in range(WORDS))
          + '}" : ' + ", ".join(f'"=l"(v[{i}])' for i in range(WORDS)) + ' : "l"(zero));\n'
          f'  unsigned long long* mine = out + ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * {WORDS};\n'
          f'  for (int i = 0; i < {WORDS}; ++i) mine[i] = v[i];\n'
          '}\n')


def key_words(key: tuple[int, int]) -> np.ndarray:
    """The 32-bit halves of the key's words and of the words the PRF derives from them first."""
    found: set[int] = set()
    for w in (key[0], key[0] ^ SIPHASH[0], key[0] ^ SIPHASH[2], key[1], key[1] ^ SIPHASH[1], key[1] ^ SIPHASH[3]):
        found |= {w & 0xFFFFFFFF, w >> 32}
    return np.array(sorted(found), dtype=np.uint32)


# The control: the PRF of every word's address under a key passed as two arguments.
CONTROL = PRF_SOURCE + (
    'extern "C" __global__ void mark(u64* a, u64 n, u64 k0, u64 k1) {\n'
    '  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)\n'
    '    a[i] ^= ws_prf(k0, k1, (u64)(a + i));\n'
    '}\n')


class Writer:
    """Runs one of the two writers over a scratch buffer with the reference key of its checks."""

    def __init__(self, device: native.Device, checks: GpuChecks, control: bool):
        self.device, self.checks, self.control = device, checks, control
        self.scratch = device.alloc(1 << 20)
        if control:
            compiled = compiler.compile_kernel(CONTROL, "mark", device.facts.arch, filename="register_mark.cu",
                                               use_cache=False)
            if not compiled.ok:
                raise SystemExit(f"the control writer did not compile:\n{compiled.log}")
            self.function = device.load_module(compiled.cubin).function("mark")

    def run(self) -> None:
        if not self.control:
            self.checks.upload_reference(self.scratch, np.zeros(self.scratch.nbytes // 8))
            return
        k0, k1 = (v - (1 << 64) if v >= 1 << 63 else v for v in self.checks.keys.ref)
        self.device.launch(self.function, (self.device.facts.sm_count * 4, 1, 1), (256, 1, 1), 0,
                           [("ptr", self.scratch.ptr), ("i64", self.scratch.nbytes // 8), ("i64", k0), ("i64", k1)])
        self.device.synchronize()


class Reader:
    def __init__(self, device: native.Device):
        compiled = compiler.compile_kernel(READER, "read", device.facts.arch, filename="register_reader.cu",
                                           use_cache=False)
        if not compiled.ok:
            raise SystemExit(f"the reader did not compile:\n{compiled.log}")
        self.device = device
        self.function = device.load_module(compiled.cubin).function("read")
        self.blocks = device.facts.sm_count * 8
        self.out = device.alloc(self.blocks * 256 * WORDS * 8)

    def clear(self) -> None:
        """Zero the reader's output; before the writer runs, since a memset between the two
        may run a kernel of the driver's own, whose registers would stand between them."""
        self.out.fill_u32(0, 0, self.out.nbytes)

    def count(self, words: np.ndarray) -> int:
        self.device.launch(self.function, (self.blocks, 1, 1), (256, 1, 1), 0, [("ptr", self.out.ptr), ("i64", 0)])
        self.device.synchronize()
        seen = np.empty(self.out.nbytes // 4, np.uint32)
        self.out.download(seen)
        return int(np.isin(seen, words).sum())


def other_context(conn: Connection, control: bool) -> None:
    """The second process: its own context and checks; the writer on each "go"."""
    device = native.open_device(0)
    checks = GpuChecks(device, device.facts.arch)
    writer = Writer(device, checks, control)
    conn.send(checks.keys.ref)
    while conn.recv() == "go":
        writer.run()
        conn.send("done")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launches", type=int, default=5, help="rounds of writer then reader, per way")
    args = p.parse_args()
    device = native.open_device(0)
    checks = GpuChecks(device, device.facts.arch)
    reader, words = Reader(device), key_words(checks.keys.ref)
    for control in (True, False):
        name = "control (key as arguments)" if control else "checks (key page)"
        writer = Writer(device, checks, control)
        for scrub in (False, True):
            found = 0
            for _ in range(args.launches):
                reader.clear()
                writer.run()
                if scrub:
                    checks.scrub(0)
                found += reader.count(words)
            print(f"{name}, same context{', scrubbed between' if scrub else ''}: {found} key words read")
        ours, theirs = mp.get_context("spawn").Pipe()
        process = mp.get_context("spawn").Process(target=other_context, args=(theirs, control), daemon=True)
        process.start()
        theirs_words, found = key_words(ours.recv()), 0
        for _ in range(args.launches):
            reader.clear()
            ours.send("go")
            ours.recv()
            found += reader.count(theirs_words)
        ours.send("stop")
        process.join(timeout=30)
        print(f"{name}, another process's context: {found} key words read")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
