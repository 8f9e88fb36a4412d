// Python bindings: one small def_* function per exposed class, docstrings beside
// each .def. Compile and timing release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cublas_baseline.hpp"
#include "device.hpp"
#include "ipc.hpp"
#include "nvrtc_compiler.hpp"
#include "program.hpp"
#include "tensor_map.hpp"
#include "timing.hpp"

namespace py = pybind11;
using namespace ws;

namespace {

// Owned for the life of the process: a py::object here would be destroyed after
// the interpreter is gone.
PyObject* g_cuda_error = nullptr;

// ("tma", (address, dtype, rows, cols, box_rows, box_cols, swizzle_bytes)).
TensorMapSpec tensor_map_spec(const py::object& value) {
  auto t = value.cast<std::tuple<uint64_t, std::string, uint64_t, uint64_t, uint32_t, uint32_t, int>>();
  return TensorMapSpec{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t),
                       std::get<4>(t), std::get<5>(t), std::get<6>(t)};
}

KernelArgs pack_args(const std::vector<std::pair<std::string, py::object>>& args) {
  KernelArgs packed;
  for (const auto& [kind, value] : args) {
    if (kind == "ptr") packed.add_pointer(value.cast<uint64_t>());
    else if (kind == "i32") packed.add_i32(value.cast<int32_t>());
    else if (kind == "i64") packed.add_i64(value.cast<int64_t>());
    else if (kind == "f32") packed.add_f32(value.cast<float>());
    else if (kind == "f64") packed.add_f64(value.cast<double>());
    else if (kind == "tma") packed.add_tensor_map(encode_tensor_map(tensor_map_spec(value)));
    else throw py::value_error("kernel argument kind must be ptr, i32, i64, f32, f64 or tma, not " + kind);
  }
  return packed;
}

LaunchConfig make_config(std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                         unsigned shared, std::array<unsigned, 3> cluster) {
  return LaunchConfig{{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, shared,
                      {cluster[0], cluster[1], cluster[2]}};
}

constexpr std::array<unsigned, 3> kNoCluster = {1, 1, 1};

py::buffer_info contiguous(const py::buffer& b, bool writable) {
  py::buffer_info info = b.request(writable);
  ssize_t expected = info.itemsize;
  for (ssize_t i = info.ndim - 1; i >= 0; --i) {
    if (info.strides[i] != expected) throw py::value_error("buffer must be C-contiguous");
    expected *= info.shape[i];
  }
  return info;
}

void def_errors(py::module_& m) {
  g_cuda_error = PyErr_NewExceptionWithDoc("warpsmith.agent._runner.CudaError",
                                "A CUDA, NVRTC or cuBLAS call failed. Attributes: name (e.g. "
                                "CUDA_ERROR_ILLEGAL_ADDRESS), text, call, code.",
                                PyExc_RuntimeError, nullptr);
  m.attr("CudaError") = py::handle(g_cuda_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CudaError& e) {
      py::object inst = py::reinterpret_borrow<py::object>(g_cuda_error)(e.what());
      inst.attr("name") = e.name();
      inst.attr("text") = e.text();
      inst.attr("call") = e.call();
      inst.attr("code") = e.code();
      PyErr_SetObject(g_cuda_error, inst.ptr());
    }
  });
}

void def_compiler(py::module_& m) {
  py::class_<CompileResult>(m, "CompileResult")
      .def_readonly("ok", &CompileResult::ok)
      .def_readonly("error", &CompileResult::error, "NVRTC error name when not ok")
      .def_readonly("log", &CompileResult::log, "NVRTC program log, verbatim")
      .def_property_readonly("cubin", [](const CompileResult& r) { return py::bytes(r.cubin); })
      .def_readonly("lowered_name", &CompileResult::lowered_name, "the entry's CUBIN symbol")
      .def_property_readonly("ptx", [](const CompileResult& r) { return py::bytes(r.ptx); },
                             "the PTX the CUBIN was built from (bytes: inline assembly may hold any byte)")
      .def_readonly("compile_ms", &CompileResult::compile_ms);
  m.def("load_nvrtc", &load_nvrtc, py::arg("candidates"), py::arg("builtins"),
        "Load NVRTC from the first candidate path that opens; returns that path.");
  m.def("nvrtc_version", &nvrtc_version, "(major, minor) of the loaded NVRTC.");
  m.def("compile", &compile, py::arg("source"), py::arg("filename"), py::arg("entry"),
        py::arg("options"), py::arg("arch"), py::call_guard<py::gil_scoped_release>(),
        "Compile CUDA C++ to a CUBIN for `arch`; failures come back as ok=False with the log.");
}

// A Python hook around timed launches, called with the GIL held; none stays empty.
Around around(py::object hook) {
  if (hook.is_none()) return {};
  auto fn = std::make_shared<py::function>(hook.cast<py::function>());
  return [fn](CUstream, int index) {
    py::gil_scoped_acquire hold;
    (*fn)(index);
  };
}

void def_device(py::module_& m) {
  py::class_<DeviceFacts>(m, "DeviceFacts")
#define WS_FACT(field) .def_readonly(#field, &DeviceFacts::field)
      WS_FACT(ordinal) WS_FACT(name) WS_FACT(uuid) WS_FACT(arch) WS_FACT(cc_major)
      WS_FACT(cc_minor) WS_FACT(sm_count) WS_FACT(driver_version) WS_FACT(total_memory)
      WS_FACT(l2_bytes) WS_FACT(smem_per_block) WS_FACT(smem_per_block_optin)
      WS_FACT(smem_per_sm) WS_FACT(regs_per_block) WS_FACT(regs_per_sm)
      WS_FACT(max_threads_per_block) WS_FACT(max_threads_per_sm) WS_FACT(max_blocks_per_sm)
      WS_FACT(warp_size)
      WS_FACT(sm_clock_khz) WS_FACT(mem_clock_khz) WS_FACT(mem_bus_bits)
      WS_FACT(peak_bandwidth_gbs);
#undef WS_FACT

  py::class_<Device, std::shared_ptr<Device>>(m, "Device")
      .def(py::init<int>(), py::arg("ordinal") = 0,
           "Open a GPU through its primary context; raises CudaError without one.")
      .def_property_readonly("facts", &Device::facts)
      .def_property_readonly("flush_bytes", &Device::flush_bytes)
      .def_property_readonly("flush_ptr", &Device::flush_ptr)
      .def("synchronize", &Device::synchronize, py::call_guard<py::gil_scoped_release>(),
           "Wait for the stream; a kernel fault surfaces here as CudaError.")
      .def("load_l2_flush",
           [](Device& d, py::bytes cubin) { d.load_l2_flush(std::string(cubin)); },
           py::arg("cubin"),
           "Flush with the kernels of this CUBIN (agent/runtime/cuda/l2_flush.cu) instead of a memset.")
      .def("stack_limit", &Device::stack_limit, "The context's per-thread stack now (CU_LIMIT_STACK_SIZE).")
      .def("alloc",
           [](std::shared_ptr<Device> d, size_t n, bool protectable) {
             return std::make_shared<Buffer>(d, n, protectable);
           },
           py::arg("nbytes"), py::arg("protectable") = false,
           "Allocate device memory; protectable: mapped so that it can be made read-only.")
      .def("load_module",
           [](std::shared_ptr<Device> d, py::bytes image) {
             return std::make_shared<Module>(d, std::string(image));
           },
           py::arg("cubin"), "Load a CUBIN.")
      .def("launch",
           [](std::shared_ptr<Device> d, const Function& fn, std::array<unsigned, 3> grid,
              std::array<unsigned, 3> block, unsigned shared,
              const std::vector<std::pair<std::string, py::object>>& args,
              std::array<unsigned, 3> cluster) {
             KernelArgs packed = pack_args(args);
             py::gil_scoped_release release;
             launch(*d, fn, make_config(grid, block, shared, cluster), packed);
           },
           py::arg("function"), py::arg("grid"), py::arg("block"), py::arg("shared"), py::arg("args"),
           py::arg("cluster") = kNoCluster,
           "Enqueue one launch; args are (kind, value) pairs: ptr, i32, i64, f32, f64, or tma with "
           "(address, dtype, rows, cols, box_rows, box_cols, swizzle_bytes), encoded by the driver "
           "and passed as a 128-byte CUtensorMap. cluster: thread block cluster dimensions.")
      .def("time",
           [](std::shared_ptr<Device> d, const Function& fn, std::array<unsigned, 3> grid,
              std::array<unsigned, 3> block, unsigned shared,
              const std::vector<std::pair<std::string, py::object>>& args,
              const TimingSettings& settings, py::object before, py::object after) {
             KernelArgs packed = pack_args(args);
             LaunchConfig cfg = make_config(grid, block, shared, kNoCluster);
             Around pre = around(before), post = around(after);
             py::gil_scoped_release release;
             return time_loop(*d, [&](CUstream) { launch(*d, fn, cfg, packed); }, settings, pre, post);
           },
           py::arg("function"), py::arg("grid"), py::arg("block"), py::arg("shared"), py::arg("args"),
           py::arg("settings"), py::arg("before") = py::none(), py::arg("after") = py::none(),
           "Time a launch under the recipe; returns every sample. before(i) / after(i) enqueue "
           "work around launch i outside its event pair (i = -1 for warm-up launches).")
      .def_property_readonly("stream_handle",
                             [](const Device& d) { return reinterpret_cast<uintptr_t>(d.stream()); },
                             "The runner's CUstream, for libraries that enqueue on it (torch.cuda.ExternalStream).")
      .def("run",
           [](std::shared_ptr<Device> d, Program& program) {
             py::gil_scoped_release release;
             program.enqueue(*d);
           },
           py::arg("program"), "Enqueue every step of a program once.")
      .def("time_program",
           [](std::shared_ptr<Device> d, Program& program, const TimingSettings& settings,
              py::object before, py::object after) {
             Around pre = around(before), post = around(after);
             py::gil_scoped_release release;
             // One event pair around the whole sequence: a program is timed as one unit.
             return time_loop(*d, [&](CUstream) { program.enqueue(*d); }, settings, pre, post);
           },
           py::arg("program"), py::arg("settings"), py::arg("before") = py::none(),
           py::arg("after") = py::none(), "Time a program under the recipe, like `time`.")
      .def("time_callable",
           [](std::shared_ptr<Device> d, py::function fn, const TimingSettings& settings,
              py::object before, py::object after) {
             Around pre = around(before), post = around(after);
             py::gil_scoped_release release;
             // Same loop, flush and events as a kernel: fn must enqueue its work on stream_handle.
             return time_loop(*d, [&](CUstream) { py::gil_scoped_acquire hold; fn(); }, settings, pre,
                              post);
           },
           py::arg("fn"), py::arg("settings"), py::arg("before") = py::none(),
           py::arg("after") = py::none(),
           "Time a Python callable that enqueues GPU work on stream_handle (a library baseline).");
}

// Device memory (a buffer, or another process's mapped into this context) into a host buffer.
template <typename Memory>
void download_into(const Memory& memory, py::buffer dst, size_t offset) {
  py::buffer_info info = contiguous(dst, true);
  size_t n = static_cast<size_t>(info.size * info.itemsize);
  py::gil_scoped_release release;
  memory.download(info.ptr, n, offset);
}

void def_memory(py::module_& m) {
  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "Buffer")
      .def_property_readonly("ptr", &Buffer::ptr)
      .def_property_readonly("nbytes", &Buffer::bytes)
      .def("upload",
           [](Buffer& b, py::buffer src, size_t offset) {
             py::buffer_info info = contiguous(src, false);
             size_t n = static_cast<size_t>(info.size * info.itemsize);
             py::gil_scoped_release release;
             b.upload(info.ptr, n, offset);
           },
           py::arg("src"), py::arg("offset") = 0, "Copy a C-contiguous host buffer in at offset.")
      .def("upload_async",
           [](Buffer& b, py::buffer src, size_t offset) {
             py::buffer_info info = contiguous(src, false);
             b.upload_async(info.ptr, static_cast<size_t>(info.size * info.itemsize), offset);
           },
           py::arg("src"), py::arg("offset") = 0,
           "Copy a C-contiguous host buffer in at offset, on the device's stream, without waiting for it.")
      .def("download", &download_into<Buffer>, py::arg("dst"), py::arg("offset") = 0,
           "Copy into a writable C-contiguous host buffer.")
      .def("fill_u32", &Buffer::fill_u32, py::arg("value"), py::arg("offset"), py::arg("nbytes"),
           "Set 4-byte words (NaN poison, sentinels).")
      .def("fill_u32_async", &Buffer::fill_u32_async, py::arg("value"), py::arg("offset"),
           py::arg("nbytes"), "Set 4-byte words on the device's stream, without waiting (timing loops).")
      .def("fill_u8", &Buffer::fill_u8, py::arg("value"), py::arg("offset"), py::arg("nbytes"))
      .def_property_readonly("protectable", &Buffer::protectable)
      .def_property("read_only", &Buffer::read_only, &Buffer::set_read_only,
                    "Kernels may only read it (a protectable buffer); set after a wait for the stream.");

  py::class_<FunctionInfo>(m, "FunctionInfo")
      .def_readonly("registers", &FunctionInfo::registers)
      .def_readonly("static_smem", &FunctionInfo::static_smem)
      .def_readonly("local_bytes", &FunctionInfo::local_bytes)
      .def_readonly("max_threads", &FunctionInfo::max_threads)
      .def_readonly("const_bytes", &FunctionInfo::const_bytes);
  py::class_<Function>(m, "Function")
      .def_readonly("name", &Function::name)
      .def_readonly("info", &Function::info)
      .def("prefer_all_shared",
           [](const Function& fn) {
             // The largest shared-memory carveout for this function's launches (a hint the
             // driver follows unless the kernel cannot run with it).
             WS_CU(driver().cuFuncSetAttribute(fn.handle, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                              CU_SHAREDMEM_CARVEOUT_MAX_SHARED));
           },
           "Ask the driver for the largest shared-memory carveout for this function.");
  py::class_<Module, std::shared_ptr<Module>>(m, "Module")
      .def("function", &Module::function, py::arg("name"), "Look up a kernel by its CUBIN symbol.");
}

void def_ipc(py::module_& m) {
  py::class_<IpcEvent, std::shared_ptr<IpcEvent>>(m, "IpcEvent")
      .def(py::init([](std::shared_ptr<Device> d, py::object handle) {
             if (handle.is_none()) return std::make_shared<IpcEvent>(d);
             return std::make_shared<IpcEvent>(d, std::string(handle.cast<py::bytes>()));
           }),
           py::arg("device"), py::arg("handle") = py::none(),
           "An interprocess event of this context, or (handle) one another process created.")
      .def("handle", [](const IpcEvent& e) { return py::bytes(e.handle()); },
           "The bytes another process opens this event with.")
      .def("record", &IpcEvent::record, "Record on the device's stream.")
      .def("wait", &IpcEvent::wait, "The device's stream waits for the last record, in whichever process.")
      .def("synchronize", &IpcEvent::synchronize, py::call_guard<py::gil_scoped_release>(),
           "The host waits for the last record.")
      .def("done", &IpcEvent::done, "Whether the last record has completed.");
  m.def("ipc_memory_handle", [](const Device& d, const Buffer& b) { return py::bytes(ipc_memory_handle(d, b)); },
        py::arg("device"), py::arg("buffer"),
        "The bytes another process maps this buffer with (not a protectable buffer).");
  py::class_<IpcMapping, std::shared_ptr<IpcMapping>>(m, "IpcMapping")
      .def(py::init([](std::shared_ptr<Device> d, py::bytes handle, size_t nbytes) {
             return std::make_shared<IpcMapping>(d, std::string(handle), nbytes);
           }),
           py::arg("device"), py::arg("handle"), py::arg("nbytes"),
           "Another process's buffer mapped into this context, until this object goes.")
      .def_property_readonly("ptr", &IpcMapping::ptr)
      .def_property_readonly("nbytes", &IpcMapping::bytes)
      .def("download", &download_into<IpcMapping>, py::arg("dst"), py::arg("offset") = 0,
           "Copy into a writable C-contiguous host buffer.");
}

void def_program(py::module_& m) {
  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def(py::init<>())
      .def("add_launch",
           [](Program& p, const Function& fn, std::array<unsigned, 3> grid,
              std::array<unsigned, 3> block, unsigned shared,
              const std::vector<std::pair<std::string, py::object>>& args,
              std::array<unsigned, 3> cluster) {
             p.add_launch(fn, make_config(grid, block, shared, cluster), pack_args(args));
           },
           py::arg("function"), py::arg("grid"), py::arg("block"), py::arg("shared"), py::arg("args"),
           py::arg("cluster") = kNoCluster, "Append a launch; args and cluster as for Device.launch.")
      .def("add_memset", &Program::add_memset_u32, py::arg("ptr"), py::arg("nbytes"),
           py::arg("value"), "Append a fill of nbytes (a multiple of 4) with a 32-bit word.")
      .def("__len__", &Program::size);
}

void def_timing(py::module_& m) {
  py::class_<TimingSettings>(m, "TimingSettings")
      .def(py::init([](int warmup, int repetitions, bool flush_l2, double max_total_ms,
                       int min_repetitions, double warmup_share) {
             return TimingSettings{warmup, repetitions, flush_l2, max_total_ms, min_repetitions,
                                   warmup_share};
           }),
           py::arg("warmup") = 10, py::arg("repetitions") = 100, py::arg("flush_l2") = true,
           py::arg("max_total_ms") = 300.0, py::arg("min_repetitions") = 10,
           py::arg("warmup_share") = 0.25)
      .def_readwrite("warmup", &TimingSettings::warmup)
      .def_readwrite("repetitions", &TimingSettings::repetitions)
      .def_readwrite("flush_l2", &TimingSettings::flush_l2)
      .def_readwrite("max_total_ms", &TimingSettings::max_total_ms)
      .def_readwrite("min_repetitions", &TimingSettings::min_repetitions)
      .def_readwrite("warmup_share", &TimingSettings::warmup_share);
  py::class_<TimingResult>(m, "TimingResult")
      .def_readonly("samples_ms", &TimingResult::samples_ms)
      .def_readonly("warmup_mean_ms", &TimingResult::warmup_mean_ms);
}

void def_cublas(py::module_& m) {
  py::class_<Cublas, std::shared_ptr<Cublas>>(m, "Cublas")
      .def(py::init<std::shared_ptr<Device>, const std::vector<std::string>&>(), py::arg("device"),
           py::arg("candidates"), "Load cuBLAS and bind a handle to the device's stream.")
      .def_property_readonly("path", &Cublas::path)
      .def_property_readonly("version", &Cublas::version)
      .def_property_readonly("workspace_ptr", &Cublas::workspace_ptr)
      .def_property_readonly("workspace_bytes", &Cublas::workspace_bytes)
      .def("sgemm",
           [](Cublas& c, std::shared_ptr<Device> d, uint64_t a, uint64_t b, uint64_t out, int m,
              int n, int k) {
             py::gil_scoped_release release;
             d->make_current();
             c.sgemm_row_major(d->stream(), a, b, out, m, n, k, 1.f, 0.f);
           },
           py::arg("device"), py::arg("a"), py::arg("b"), py::arg("c"), py::arg("m"), py::arg("n"),
           py::arg("k"), "Enqueue row-major C = A @ B once.")
      .def("time_sgemm",
           [](Cublas& c, std::shared_ptr<Device> d, uint64_t a, uint64_t b, uint64_t out, int m,
              int n, int k, const TimingSettings& settings, py::object before, py::object after) {
             Around pre = around(before), post = around(after);
             py::gil_scoped_release release;
             return time_loop(
                 *d, [&](CUstream s) { c.sgemm_row_major(s, a, b, out, m, n, k, 1.f, 0.f); },
                 settings, pre, post);
           },
           py::arg("device"), py::arg("a"), py::arg("b"), py::arg("c"), py::arg("m"), py::arg("n"),
           py::arg("k"), py::arg("settings"), py::arg("before") = py::none(),
           py::arg("after") = py::none(), "Time row-major SGEMM under the same recipe.")
      .def("gemm_bf16",
           [](Cublas& c, std::shared_ptr<Device> d, uint64_t a, uint64_t b, uint64_t out, int m,
              int n, int k) {
             py::gil_scoped_release release;
             d->make_current();
             c.gemm_bf16_row_major(d->stream(), a, b, out, m, n, k);
           },
           py::arg("device"), py::arg("a"), py::arg("b"), py::arg("c"), py::arg("m"), py::arg("n"),
           py::arg("k"), "Enqueue row-major bf16 C = A @ B once (cublasGemmEx, fp32 compute).")
      .def("time_gemm_bf16",
           [](Cublas& c, std::shared_ptr<Device> d, uint64_t a, uint64_t b, uint64_t out, int m,
              int n, int k, const TimingSettings& settings, py::object before, py::object after) {
             Around pre = around(before), post = around(after);
             py::gil_scoped_release release;
             return time_loop(
                 *d, [&](CUstream s) { c.gemm_bf16_row_major(s, a, b, out, m, n, k); }, settings,
                 pre, post);
           },
           py::arg("device"), py::arg("a"), py::arg("b"), py::arg("c"), py::arg("m"), py::arg("n"),
           py::arg("k"), py::arg("settings"), py::arg("before") = py::none(),
           py::arg("after") = py::none(), "Time row-major bf16 GEMM under the same recipe.");
}

}  // namespace

PYBIND11_MODULE(_runner, m) {
  m.doc() = "warpsmith's native runner: NVRTC compile, Driver API launch, CUDA-event timing.";
  def_errors(m);
  def_compiler(m);
  def_device(m);
  def_memory(m);
  def_ipc(m);
  def_program(m);
  def_timing(m);
  def_cublas(m);
}
