"""What a kernel's machine code may read of its launch's constant bank and do with module
data's addresses (agent/runtime/sass_memory.py, agent/runtime/bank0_layout.py): kernels
compiled with real NVRTC and read with real nvdisasm. Attacks on the parameters are compiled
in this process, past the compile process's PTX audit, so that what is tested is the machine
code's rule alone; state kept between launches is judged through compile_candidate."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import pytest
from workload_factory import ROOT

from warpsmith.agent.cli.import_problem import _ENTRY
from warpsmith.agent.evaluate.compile_audit import compile_candidate
from warpsmith.agent.runtime import native
from warpsmith.agent.runtime.bank0_layout import layout
from warpsmith.agent.runtime.compile_child import compile_request
from warpsmith.agent.runtime.sass import disassemble, nvdisasm
from warpsmith.agent.runtime.sass_memory import audit_memory
from warpsmith.agent.spec.candidate import Candidate

pytestmark = pytest.mark.skipif(nvdisasm() is None, reason="nvdisasm (the nvidia-cuda-nvdisasm wheel) not installed")


def machine_code(source: str, arch: str = "sm_90") -> tuple[bytes, str]:
    """The CUBIN of `source` and its listing, from NVRTC in this process (no audit at all)."""
    native.nvrtc()
    r = native.nvrtc_compile(source, "k.cu", "k", [], arch)
    assert r.ok, r.log
    return bytes(r.cubin), disassemble(bytes(r.cubin))


def findings(source: str, arch: str = "sm_90"):
    return audit_memory(*machine_code(source, arch))


def candidate(source: str, nvrtc: Any = None):
    c = Candidate(source, "k", None, name="memory")  # type: ignore[arg-type]  # compiled only, never launched
    return compile_candidate(c, "sm_90", False, narrow_allowed=frozenset(), **({"nvrtc": nvrtc} if nvrtc else {}))


# ---------------------------------------------------------------------------------------
# The launch's constant bank: the parameters by value, the launch's sizes, nothing else.

PARAMETER_ATTACKS = {
    # The parameters' generic address (cvta.param), read 4 KiB further on: the launch-parameter ring.
    "read past the parameters' address": (
        'extern "C" __global__ void k(unsigned long long* out, int n) {\n  unsigned long long p;\n'
        '  asm volatile("mov.b64 %0, k_param_0;\\n\\tcvta.param.u64 %0, %0;" : "=l"(p));\n'
        '  out[threadIdx.x] = *reinterpret_cast<volatile unsigned long long*>(p + 0x1000 * n);\n}\n',
        r"LD\.E\.64\.STRONG\.SYS in k uses the parameters' address \(c\[0x0\]\[0x198\]\) other than as a TMA"),
    # A vector read of 16 bytes at the last, 4-byte parameter: 12 bytes past the parameters.
    "vector past the last parameter": (
        'extern "C" __global__ void k(unsigned long long* out, unsigned n) {\n  unsigned a, b, c, d;\n'
        '  asm volatile("ld.param.v4.u32 {%0, %1, %2, %3}, [k_param_1];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d));\n'
        '  out[threadIdx.x] = a + b + c + d;\n}\n', r"ULDC\.64 c\[0x0\]\[0x218\] in k reads a word .* no parameter"),
    # A parameter read at a runtime offset: anywhere in the bank.
    "register-indexed parameter read": (
        'extern "C" __global__ void k(unsigned long long* out, long long off) {\n  unsigned long long v;\n'
        '  asm volatile("ld.param::entry.u64 %0, [%1];" : "=l"(v) : "l"(off));\n  out[threadIdx.x] = v;\n}\n',
        r"c\[0x0\]\[U?R\d+\+0x[0-9a-f]+\] in k reads the launch's constant bank at a register index"),
    # The driver's environment registers.
    "envreg": ('extern "C" __global__ void k(unsigned* out) {\n  unsigned v;\n'
               '  asm volatile("mov.u32 %0, %%envreg3;" : "=r"(v));\n  out[threadIdx.x] = v;\n}\n',
               r"c\[0x0\]\[0x4c\] in k reads a word of the launch's constant bank"),
    # A tensor map's address moved by a runtime offset: a descriptor read from past the parameters.
    "TMA descriptor off its parameter": (
        'struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };\n'
        'extern "C" __global__ void k(const __grid_constant__ CUtensorMap map, float* y, int off) {\n'
        '  asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<unsigned long long>(&map) + off) : "memory");\n'
        '  y[threadIdx.x] = 1.f;\n}\n', r"UTMACCTL\.PF in k takes a TMA descriptor at no parameter's offset"),
}


@pytest.mark.parametrize("how", sorted(PARAMETER_ATTACKS))
def test_parameter_attacks_are_refused_by_the_machine_code(how):
    """Each reads the launch's constant bank beyond the kernel's own parameters, or the parameter ring through
    the parameters' address; the machine code names the instruction."""
    source, pattern = PARAMETER_ATTACKS[how]
    found = findings(source)
    assert any(re.search(pattern, f) for f in found.parameters), found
    assert found.state == ()


def test_a_parameter_read_the_ptx_audit_never_saw_is_refused():
    """With its PTX withheld from the compile process (what an audit that misread the PTX amounts to), the
    machine code alone refuses a kernel that takes its parameters' address and reads past it: PARAMETER_ADDRESS,
    one line naming the instruction."""
    def ptx_withheld(source: str, filename: str, entry: str, options: list, arch: str, timeout_s: Any) -> dict:
        class Withheld:
            def __init__(self, result: Any):
                self.result = result

            def __getattr__(self, name: str) -> Any:
                return b"" if name == "ptx" else getattr(self.result, name)
        native.nvrtc()
        request = {"source": source, "filename": filename, "entry": entry, "options": options, "arch": arch}
        return compile_request(lambda *a: Withheld(native.nvrtc_compile(*a)), request, [])
    source = PARAMETER_ATTACKS["read past the parameters' address"][0] + "// PTX withheld\n"
    r = candidate(source, nvrtc=ptx_withheld)
    assert not r.ok and r.error == "PARAMETER_ADDRESS" and "\n" not in r.log, (r.error, r.log)
    assert "LD.E.64.STRONG.SYS in k uses the parameters' address" in r.log and "by value" in r.log


def test_a_tma_descriptor_parameter_and_the_launch_sizes_stay_allowed():
    """The address of a `__grid_constant__ CUtensorMap` as a TMA prefetch's and the tensormap fence's operand,
    blockDim, gridDim, the dynamic shared memory size and a 1-byte and a 120-byte parameter: no finding."""
    source = ('struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };\nstruct Big { float v[30]; };\n'
              'extern "C" __global__ void k(float* y, const __grid_constant__ CUtensorMap map, char c, Big b, int n) {\n'
              '  unsigned dyn; asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));\n'
              '  asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<unsigned long long>(&map)) : "memory");\n'
              '  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;"\n'
              '               :: "l"(reinterpret_cast<unsigned long long>(&map)) : "memory");\n'
              '  y[threadIdx.x] = n + c + b.v[29] + blockDim.y + gridDim.z + dyn;\n}\n')
    found = findings(source)
    assert found.parameters == () and found.state == (), found


def test_what_cannot_be_read_is_refused():
    """A CUBIN whose tables point outside it, and a target whose driver words were never measured: findings,
    never an empty answer."""
    cubin, listing = machine_code('extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.f; }')
    assert audit_memory(cubin, listing) == audit_memory(cubin, listing.replace("sm_90", "sm_90a"))  # same layout
    assert "could not be read" in audit_memory(cubin[:len(cubin) // 2], listing).parameters[0]
    assert "not known on sm_130" in audit_memory(cubin, listing.replace(".target\tsm_90", ".target\tsm_130")).parameters[0]


# The driver's words an honest kernel reads, by the PTX that reads them; and words it may not read.
READABLE = ["ntid.x", "ntid.y", "ntid.z", "nctaid.x", "nctaid.y", "nctaid.z", "dynamic_smem_size", "total_smem_size",
            "nsmid"]
HOPPER_READABLE = ["cluster_nctaid.x", "cluster_nctarank", "nclusterid.z", "aggr_smem_size", "reserved_smem_offset_end"]
REFUSED = ["envreg0", "envreg31", "gridid:64", "current_graph_exec:64"]


@lru_cache(maxsize=None)
def _offsets(arch: str, body: str) -> frozenset[int]:
    _, listing = machine_code('extern "C" __global__ void k(unsigned long long* out) { unsigned long long v; '
                              + body + ' out[threadIdx.x] = v; }', arch)
    return frozenset(int(o, 16) for o in re.findall(r"(?<![\w.])c\[0x0\]\[(0x[0-9a-f]+)\]", listing))


def _probe(arch: str, register: str) -> set[int]:
    """The bank-0 offsets a kernel reading `register` (`name:64` for a 64-bit one, or an address
    conversion) reads beyond what an empty kernel does."""
    name, _, wide = register.partition(":")
    if name.startswith("cvta"):
        body = f'asm volatile("{name}.u64 %0, %1;" : "=l"(v) : "l"(out));'
    elif wide:
        body = f'asm volatile("mov.u64 %0, %%{name};" : "=l"(v));'
    else:
        body = f'unsigned w; asm volatile("mov.u32 %0, %%{name};" : "=r"(w)); v = w;'
    return set(_offsets(arch, body) - _offsets(arch, "v = 1;"))


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_90", "sm_120"])
def test_the_bank0_layout_is_what_ptxas_reads(arch):
    """The table of driver words (bank0_layout.py) against NVRTC's own: every special register an honest kernel
    reads maps to allowed words, the refused ones (environment registers, grid and graph ids) to none, and the
    parameters' and __constant__ memory's generic addresses to the words the table names for them."""
    bank = layout(arch)
    assert bank is not None
    for register in READABLE + (HOPPER_READABLE if arch == "sm_90" else []):
        for offset in _probe(arch, register):
            assert bank.name(offset, 4) is not None, (register, hex(offset))
    for register in REFUSED:
        for offset in _probe(arch, register):
            assert bank.name(offset, 4) is None, (register, hex(offset))
    assert _probe(arch, "cvta.to.param") == {bank.parameter_address}
    assert bank.constant_window in _probe(arch, "cvta.const")


# ---------------------------------------------------------------------------------------
# Module data: read it, never write it or let its address go anywhere else.

STATE_ATTACKS = {
    "a __device__ counter written": ("__device__ unsigned counter;\n"
                                     'extern "C" __global__ void k(float* out) {\n'
                                     "  out[threadIdx.x] = counter;\n  if (threadIdx.x == 0) counter = counter + 1;\n}\n",
                                     "STG.E in k writes the __device__ global `counter`"),
    "atomicAdd on a module global": ("__device__ unsigned launches;\n"
                                     'extern "C" __global__ void k(float* out, int n) {\n'
                                     "  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = atomicAdd(&launches, 1u) > 3 ? 0.f : n;\n}\n",
                                     "ATOMG.E.ADD.STRONG.GPU in k writes the __device__ global `launches`"),
    "a global's address laundered by xor": ("__device__ unsigned counter;\n"
                                            'extern "C" __global__ void k(float* out, unsigned long long key) {\n'
                                            "  unsigned long long a = (unsigned long long)&counter ^ key;\n"
                                            "  *(unsigned*)(a ^ key) = 1;\n  out[threadIdx.x] = 1.f;\n}\n",
                                            "in k writes the __device__ global `counter`"),
    "a global's address kept in shared memory": ("__device__ float stash[1024];\n"
                                                 'extern "C" __global__ void k(float* out) {\n'
                                                 "  __shared__ float* volatile sp;\n  if (threadIdx.x == 0) sp = stash;\n"
                                                 "  __syncthreads();\n  sp[threadIdx.x] = out[threadIdx.x];\n}\n",
                                                 "STS.64 in k uses the address of the __device__ global `stash` other than to read it"),
    "a table's address read bit by bit": ('__device__ const float table[8] = {1, 2, 3, 4, 5, 6, 7, 8};\n'
                                          'extern "C" __global__ void k(float* out, int i) {\n'
                                          "  unsigned long long bits = 0;\n"
                                          "  for (int b = 0; b < 64; ++b) if (((unsigned long long)&table >> b) & 1) bits |= 1ull << b;\n"
                                          "  out[threadIdx.x] = table[i & 7] + (float)bits;\n}\n",
                                          "uses the address of the __device__ global `table` other than to read it"),
}


@pytest.mark.parametrize("how", sorted(STATE_ATTACKS))
def test_state_kept_in_module_data_is_refused_naming_the_instruction(how):
    """KERNEL_KEEPS_STATE, one line naming the instruction and the global, for each way a launch could leave
    something for the next in module memory."""
    source, phrase = STATE_ATTACKS[how]
    r = candidate(source)
    assert not r.ok and r.error == "KERNEL_KEEPS_STATE" and "\n" not in r.log, (r.error, r.log)
    assert phrase in r.log and r.log.startswith("kernels may not keep state between launches"), r.log


def test_a_constant_table_only_read_is_allowed():
    """A `const __device__` table and a `__constant__` array, each indexed at run time and only read: no state."""
    r = candidate('__device__ const float table[8] = {1, 2, 3, 4, 5, 6, 7, 8};\n'
                  '__constant__ float ctab[8] = {8, 7, 6, 5, 4, 3, 2, 1};\n'
                  'extern "C" __global__ void k(float* out, int i) {\n'
                  '  out[threadIdx.x] = table[(i + threadIdx.x) & 7] * ctab[i & 7];\n}\n')
    assert r.ok, (r.error, r.log)


def test_printf_is_refused_with_its_reason():
    """printf passes a format string kept in module data to vprintf: refused, and the line says so."""
    r = candidate('extern "C" __global__ void k(float* out, int n) {\n'
                  '  if (n == 77) printf("n=%d\\n", n);\n  out[threadIdx.x] = n;\n}\n')
    assert not r.ok and r.error == "KERNEL_KEEPS_STATE" and "printf and assert" in r.log, r.log


def test_a_globals_address_in_another_globals_initialiser_is_a_state_finding():
    """A pointer to a global kept in another's initialiser (a relocation in the data, not in the address table)
    would hand the kernel the address without any instruction making it (the PTX's `generic()`, refused there too)."""
    found = findings("__device__ unsigned counter;\n__device__ unsigned* const alias = &counter;\n"
                     'extern "C" __global__ void k(float* out) {\n'
                     "  out[threadIdx.x] = atomicAdd(*(unsigned* volatile*)&alias, 1u);\n}\n")
    assert ".nv.global.init holds the address of the __device__ global `counter`" in found.state, found


def test_the_generic_address_of_constant_memory_is_a_state_finding():
    """cvta.const (a writable pointer to __constant__ data) reads the constant window's word of bank 0."""
    found = findings('__constant__ float ctab[64];\nextern "C" __global__ void k(float* out) {\n'
                     '  float* p; asm volatile("cvta.const.u64 %0, ctab;" : "=l"(p));\n'
                     '  p[threadIdx.x] = out[threadIdx.x];\n}\n')
    assert any("c[0x0][0xd0]" in f and "__constant__" in f for f in found.state), found


# ---------------------------------------------------------------------------------------
# No false refusal, and the planted GPU kernels compile to their verdicts.

def test_every_kernelbench_example_passes():
    """The kernels beside `warpsmith import`'s KernelBench examples (no workload of their own) pass every audit."""
    for path in sorted((ROOT / "examples" / "kernelbench").glob("*.cu")):
        source = path.read_text()
        entry = _ENTRY.findall(source)[0]  # the entry `warpsmith import` takes
        r = compile_candidate(Candidate(source, entry, None, name=path.stem), "sm_90", False,  # type: ignore[arg-type]
                              narrow_allowed=frozenset())
        assert r.ok, (path.name, r.error, r.log[-400:])


def test_the_planted_gpu_kernels_compile_to_their_verdicts():
    """tests/test_gpu_adversarial.py's planted kernels: those expected compile_failed are refused here (state in
    module memory or the heap), every other one compiles, so on the GPU it meets the check it was planted for."""
    from test_gpu_adversarial import EXPECTED, PLANTED, RESERVED_STASH, SHARED_STASH
    for name, source in [*PLANTED.items(), ("shared_stash", SHARED_STASH), ("reserved_stash", RESERVED_STASH)]:
        r = candidate(source)
        refused = EXPECTED.get(name) == {"compile_failed"}
        assert r.ok is not refused, (name, r.error, r.log[-300:])
        if refused:
            assert r.error == "KERNEL_KEEPS_STATE", (name, r.error, r.log)


# ptxas's elect-one loop around a uniform instruction, in NVRTC 13.0's code for the bf16 GEMM's
# producer: the predicate of a 64-bit add's carry (P1, spent by IMAD.X) is reused for ELECT
# under a guard P0 set true just before, and read again in the loop. `CARRY_READ` reads the
# carry's predicate itself: a bit of the parameters' address a kernel could branch on.
ELECT_LOOP = """        /*0000*/                   LDC.64 R22, c[0x0][0x198] ;
        /*0010*/                   IADD3 R24, P1, R22, 0xb0, RZ ;
        /*0020*/                   IMAD.X R25, RZ, RZ, R23, P1 ;
        /*0030*/                   PLOP3.LUT P0, PT, PT, PT, PT, 0x80, 0x0 ;
.L_x_1:
        /*0040*/               @P0 ELECT P1, URZ, PT ;
        /*0050*/               @P1 PLOP3.LUT P0, PT, P1, PT, PT, 0x8, 0x0 ;
        /*0060*/                   PLOP3.LUT P1, PT, PT, PT, PT, 0x8, 0x0 ;
        /*0070*/               @P0 BRA.U.ANY `(.L_x_1) ;
        /*0080*/                   EXIT ;
"""
CARRY_READ = ELECT_LOOP.replace("@P0 ELECT P1, URZ, PT", "PLOP3.LUT P2, PT, PT, PT, PT, 0x80, 0x0")


@pytest.mark.parametrize("body, refused", [(ELECT_LOOP, False), (CARRY_READ, True)])
def test_a_spent_carry_predicate_reused_for_elect_is_no_read_of_the_parameters_address(body, refused):
    cubin, listing = machine_code('extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.f; }')
    start = listing.index("k:\n.text.k:\n") + len("k:\n.text.k:\n")
    end = listing.index(".L_x_0:", start)
    found = audit_memory(cubin, listing[:start] + body + listing[end:]).parameters
    assert bool(found) == refused, found
    if refused:
        assert "PLOP3.LUT" in found[0] and "parameters' address" in found[0]


# A TMA load whose descriptor's address ptxas moves through vector registers with IMAD copies
# (`IMAD.U32 R10, RZ, RZ, UR6`), as NVRTC 13.0 does for wgmma_swap's producer; the map is the
# kernel's first parameter, 0x30 past the parameters' start (its 64-byte alignment).
TMA_THROUGH_IMAD = """        /*0000*/                   ULDC.64 UR4, c[0x0][0x198] ;
        /*0010*/                   UIADD3 UR6, UP0, UR4, 0x30, URZ ;
        /*0020*/                   UIADD3.X UR8, URZ, UR5, URZ, UP0, !UPT ;
        /*0030*/                   IMAD.U32 R10, RZ, RZ, UR6 ;
        /*0040*/                   IMAD.U32 R11, RZ, RZ, UR8 ;
        /*0050*/                   R2UR UR12, R10 ;
        /*0060*/                   R2UR UR13, R11 ;
        /*0070*/                   UTMALDG.2D [UR16], [UR12] ;
        /*0080*/                   EXIT ;
"""


@pytest.mark.parametrize("body, refused", [
    (TMA_THROUGH_IMAD, False),
    (TMA_THROUGH_IMAD.replace("R10, RZ, RZ, UR6", "R10, R2, 0x2, UR6"), True),  # a product: no known offset
    (TMA_THROUGH_IMAD.replace("R10, RZ, RZ, UR6", "R10, UR6, 0x1, RZ"), False),  # times one plus zero: a copy
    (TMA_THROUGH_IMAD.replace("UR4, 0x30, URZ", "UR4, 0x40, URZ"), True),  # past the map: not one parameter's bytes
    # IMAD.HI adds the pair UR6:UR7 and returns the high word: not a copy of UR6
    (TMA_THROUGH_IMAD.replace("IMAD.U32 R10, RZ, RZ, UR6", "IMAD.HI.U32 R10, RZ, RZ, UR6"), True),
], ids=["zero-product-copy", "product", "times-one-copy", "past-the-map", "imad-hi"])
def test_a_tma_descriptor_address_copied_by_imad_keeps_its_offset(body, refused):
    cubin, listing = machine_code('struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };\n'
                                  'extern "C" __global__ void k(const __grid_constant__ CUtensorMap map, float* y, int n) '
                                  '{ if (threadIdx.x < n) y[threadIdx.x] = 1.f; }')
    start = listing.index("k:\n.text.k:\n") + len("k:\n.text.k:\n")
    end = listing.index(".L_x_0:", start)
    found = audit_memory(cubin, listing[:start] + body + listing[end:]).parameters
    assert bool(found) == refused, found
    if refused:
        assert "UTMALDG.2D in k takes a TMA descriptor at no parameter's offset" in found[0], found


def test_imad_hi_reads_its_addend_as_a_register_pair():
    """IMAD.HI adds a register pair and returns its high word: the parameters' address moved
    into the pairs' high registers (UR7, UR11) reaches R2 and R3 through it, and a load from
    R2:R3 is refused."""
    cubin, listing = machine_code('extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.f; }')
    start = listing.index("k:\n.text.k:\n") + len("k:\n.text.k:\n")
    end = listing.index(".L_x_0:", start)
    body = """        /*0000*/                   ULDC.64 UR8, c[0x0][0x198] ;
        /*0010*/                   UMOV UR7, UR8 ;
        /*0020*/                   UMOV UR11, UR9 ;
        /*0030*/                   UMOV UR6, URZ ;
        /*0040*/                   UMOV UR10, URZ ;
        /*0050*/                   IMAD.HI R2, RZ, RZ, UR6 ;
        /*0060*/                   IMAD.HI R3, RZ, RZ, UR10 ;
        /*0070*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0080*/                   EXIT ;
"""
    found = audit_memory(cubin, listing[:start] + body + listing[end:]).parameters
    assert found and "parameters' address" in found[0], found


def _lines(*instructions: str) -> str:
    """A spliced body in nvdisasm's form: one line per instruction, labels as written."""
    return "".join(f"{i}\n" if i.endswith(":") else f"        /*{k * 16:04x}*/                   {i} ;\n"
                   for k, i in enumerate(instructions))


LOAD = ("ULDC.64 UR4, c[0x0][0x208]", "LDG.E R4, desc[UR4][R12.64+0x1000]", "EXIT")
HIDDEN = ("LDC.64 R12, c[0x0][0x198]", *LOAD)
# Ways to move the parameters' address into registers that look clean, or to give it a wrong
# known offset, each on real Hopper semantics the audit once modelled wrong.
MOVES = {
    # bytes and halves of the address read one at a time and put back together
    "bytes of the address": ("LDC.U8 R10, c[0x0][0x198]", "LDC.U8 R11, c[0x0][0x199]", "LDC.U16 R14, c[0x0][0x19c]",
                             "PRMT R12, R10, 0x3340, R11", "PRMT R13, R14, 0x5410, RZ", *LOAD),
    # I2F.F64.U64 reads the pair R2:R3 with no `.64` on it; the round trip is exact
    "a pair read without .64": ("LDC.64 R8, c[0x0][0x198]", "MOV R2, RZ", "MOV R3, R8", "I2F.F64.U64 R4, R2",
                                "F2I.U64.F64.TRUNC R6, R4", "MOV R3, R9", "I2F.F64.U64 R4, R2",
                                "F2I.U64.F64.TRUNC R10, R4", "MOV R12, R7", "MOV R13, R11", "MOV R8, RZ", "MOV R9, RZ",
                                "MOV R3, RZ", *LOAD),
    # the carry out of the high word is a comparison on the address
    "a carry of the high word": ("LDC.64 R8, c[0x0][0x198]", "S2R R6, SR_TID.X", "IADD3 R10, P0, R9, R6, RZ",
                                 "MOV R8, RZ", "MOV R9, RZ", "MOV R10, RZ", "SEL R7, RZ, 0x1, !P0",
                                 "ULDC.64 UR4, c[0x0][0x208]", "STG.E desc[UR4][R2.64], R7", "EXIT"),
    # a guarded compare that never runs leaves the carry in P0
    "a guarded predicate write": ("LDC.64 R8, c[0x0][0x198]", "S2R R6, SR_TID.X", "IADD3 R10, P0, R8, R6, RZ",
                                  "MOV R8, RZ", "MOV R9, RZ", "MOV R10, RZ", "ISETP.NE.AND P3, PT, RZ, RZ, PT",
                                  "@P3 ISETP.NE.AND P0, PT, RZ, RZ, PT", "SEL R7, RZ, 0x1, !P0",
                                  "ULDC.64 UR4, c[0x0][0x208]", "STG.E desc[UR4][R2.64], R7", "EXIT"),
    # code only a computed return or jump reaches
    "code behind a computed return": ("MOV R20, 32@lo((k + .L_x_60@srel))", "MOV R21, 32@hi((k + .L_x_60@srel))",
                                      "RET.REL.NODEC R20 `(k)", ".L_x_60:", *HIDDEN),
    "code behind a computed jump": ("MOV R2, 0x20", "BRX R2 -0x30", "EXIT", *HIDDEN),
}
TMA_MOVES = {
    # each carry-in of an .X add adds one that no operand shows: 0x30 + 2 per trip
    "carry-ins into the low word": ("ULDC.64 UR4, c[0x0][0x198]", "UIADD3 UR6, UP0, UR4, 0x30, URZ",
                                    "UIADD3.X UR7, URZ, UR5, URZ, UP0, !UPT", "UIADD3.X UR6, UR6, URZ, URZ, UPT, UPT",
                                    "UTMALDG.2D [UR16], [UR6]", "EXIT"),
    # the descriptor's high word is another address's
    "another high word": ("ULDC.64 UR4, c[0x0][0x198]", "UIADD3 UR6, UR4, 0x30, URZ", "UIADD3 UR7, UR5, 0x1, URZ",
                          "UTMALDG.2D [UR16], [UR6]", "EXIT"),
}


@pytest.mark.parametrize("how", sorted(MOVES) + sorted(TMA_MOVES))
def test_the_parameters_address_cannot_be_laundered(how):
    tma = how in TMA_MOVES
    source = ('struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };\n'
              'extern "C" __global__ void k(const __grid_constant__ CUtensorMap map, float* y, int n) '
              '{ if (threadIdx.x < n) y[threadIdx.x] = 1.f; }') if tma else \
        'extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.f; }'
    cubin, listing = machine_code(source)
    start = listing.index("k:\n.text.k:\n") + len("k:\n.text.k:\n")
    end = listing.index(".L_x_0:", start)
    found = audit_memory(cubin, listing[:start] + _lines(*(TMA_MOVES if tma else MOVES)[how]) + listing[end:]).parameters
    assert found and any("parameters' address" in f or "TMA descriptor" in f for f in found), found


def test_a_float64_round_trip_of_the_address_from_nvrtc_is_refused():
    """The same laundering written in PTX (cvta.param, cvt.rn.f64.u64, cvt.rzi.u64.f64): ptxas
    reads the pair of each conversion without a `.64` operand."""
    source = ('extern "C" __global__ void k(unsigned long long* out, int n) {\n unsigned long long v;\n'
              ' asm volatile("{ .reg .b64 a, t, u; .reg .b32 lo, hi, z, x, y; .reg .f64 d;\\n\\t"\n'
              ' "mov.b64 a, k_param_0; cvta.param.u64 a, a; mov.b64 {lo,hi}, a; mov.b32 z, 0;\\n\\t"\n'
              ' "mov.b64 t, {z, lo}; cvt.rn.f64.u64 d, t; cvt.rzi.u64.f64 u, d; mov.b64 {z, x}, u;\\n\\t"\n'
              ' "mov.b64 t, {z, hi}; cvt.rn.f64.u64 d, t; cvt.rzi.u64.f64 u, d; mov.b64 {z, y}, u;\\n\\t"\n'
              ' "mov.b64 %0, {x, y}; }" : "=l"(v));\n'
              ' out[threadIdx.x] = *reinterpret_cast<volatile unsigned*>(v + 0x1000 * n);\n}\n')
    found = audit_memory(*machine_code(source)).parameters
    assert found and "I2F.F64.U64 in k uses the parameters' address" in found[0], found
