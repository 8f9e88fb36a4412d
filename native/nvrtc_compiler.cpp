#include "nvrtc_compiler.hpp"

#include <chrono>
#include <mutex>

#include "dynlib.hpp"

namespace ws {
namespace {

#define WS_NVRTC_FUNCTIONS(X)                                                      \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)            \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcAddNameExpression) X(nvrtcGetLoweredName) \
  X(nvrtcGetPTXSize) X(nvrtcGetPTX)

struct Nvrtc {
#define WS_DECLARE(fn) decltype(&::fn) fn = nullptr;
  WS_NVRTC_FUNCTIONS(WS_DECLARE)
#undef WS_DECLARE
};

std::mutex g_mutex;
Nvrtc* g_nvrtc = nullptr;
std::string g_path;

const Nvrtc& nvrtc() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_nvrtc)
    throw CudaError("NVRTC_NOT_LOADED",
                    "NVRTC is not loaded; install the nvidia-cuda-nvrtc wheel (CUDA 13)",
                    "nvrtc", -1);
  return *g_nvrtc;
}

// Error names as the header spells them: the API only gives prose.
std::string result_name(nvrtcResult r) {
  switch (r) {
    case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case NVRTC_ERROR_PROGRAM_CREATION_FAILURE: return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    case NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID: return "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    default: return "NVRTC_ERROR_" + std::to_string(static_cast<int>(r));
  }
}

void check(nvrtcResult r, const char* call) {
  if (r == NVRTC_SUCCESS) return;
  throw CudaError(result_name(r), nvrtc().nvrtcGetErrorString(r), call, static_cast<int>(r));
}

// Owns an nvrtcProgram.
class Program {
 public:
  Program(const std::string& source, const std::string& filename) {
    check(nvrtc().nvrtcCreateProgram(&prog_, source.c_str(), filename.c_str(), 0, nullptr,
                                     nullptr),
          "nvrtcCreateProgram");
  }
  ~Program() {
    if (prog_) nvrtc().nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

  std::string log() const {
    size_t size = 0;
    if (nvrtc().nvrtcGetProgramLogSize(prog_, &size) != NVRTC_SUCCESS || size <= 1) return {};
    std::string text(size, '\0');
    nvrtc().nvrtcGetProgramLog(prog_, text.data());
    text.resize(size - 1);  // drop the terminating NUL
    return text;
  }

 private:
  nvrtcProgram prog_ = nullptr;
};

}  // namespace

std::string load_nvrtc(const std::vector<std::string>& candidates,
                       const std::vector<std::string>& builtins) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_nvrtc) return g_path;
  static DynLib builtins_lib, lib;
  std::string why;
  if (!builtins.empty()) builtins_lib.open(builtins, RTLD_NOW | RTLD_GLOBAL, why);
  why.clear();
  if (!lib.open(candidates, RTLD_NOW | RTLD_GLOBAL, why))
    throw CudaError("NVRTC_NOT_FOUND",
                    "NVRTC (libnvrtc.so.13) could not be loaded (" + why +
                        "); run `pip install nvidia-cuda-nvrtc` or install a CUDA 13 toolkit",
                    "dlopen", -1);
  static Nvrtc table;
#define WS_LOAD(fn) lib.load(table.fn, WS_STR(fn), "NVRTC");
  WS_NVRTC_FUNCTIONS(WS_LOAD)
#undef WS_LOAD
  g_nvrtc = &table;
  g_path = lib.path();
  return g_path;
}

std::pair<int, int> nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtc().nvrtcVersion(&major, &minor), "nvrtcVersion");
  return {major, minor};
}

CompileResult compile(const std::string& source, const std::string& filename,
                      const std::string& entry, const std::vector<std::string>& options,
                      const std::string& arch) {
  const Nvrtc& api = nvrtc();
  CompileResult result;
  auto start = std::chrono::steady_clock::now();
  Program prog(source, filename);
  if (!entry.empty()) check(api.nvrtcAddNameExpression(prog.get(), entry.c_str()), "nvrtcAddNameExpression");

  std::vector<std::string> all = {"--gpu-architecture=" + arch, "--ptxas-options=-v"};
  all.insert(all.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const auto& o : all) argv.push_back(o.c_str());

  nvrtcResult r = api.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  result.log = prog.log();
  if (r == NVRTC_SUCCESS) {
    size_t size = 0;
    check(api.nvrtcGetCUBINSize(prog.get(), &size), "nvrtcGetCUBINSize");
    if (size == 0) {
      result.error = "NVRTC_NO_CUBIN";
      result.log += "\nNVRTC produced no CUBIN: give a real architecture (sm_90), not compute_90\n";
    } else {
      result.cubin.resize(size);
      check(api.nvrtcGetCUBIN(prog.get(), result.cubin.data()), "nvrtcGetCUBIN");
      // The PTX the CUBIN was built from (NVRTC keeps it for a real architecture too): the
      // parent audits its instructions (agent/runtime/ptx_audit.py).
      size_t ptx_size = 0;
      if (api.nvrtcGetPTXSize(prog.get(), &ptx_size) == NVRTC_SUCCESS && ptx_size > 1) {
        result.ptx.resize(ptx_size);
        check(api.nvrtcGetPTX(prog.get(), result.ptx.data()), "nvrtcGetPTX");
        result.ptx.resize(ptx_size - 1);  // drop the terminating NUL
      }
      result.ok = true;
      if (!entry.empty()) {
        const char* lowered = nullptr;
        if (api.nvrtcGetLoweredName(prog.get(), entry.c_str(), &lowered) == NVRTC_SUCCESS && lowered)
          result.lowered_name = lowered;
        else
          result.lowered_name = entry;
      }
    }
  } else {
    result.error = result_name(r);
  }
  result.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace ws
