// NVRTC, loaded at run time: CUDA C++ source -> CUBIN for one exact architecture.
#pragma once
#include <nvrtc.h>

#include <string>
#include <vector>

namespace ws {

struct CompileResult {
  bool ok = false;
  std::string error;     // NVRTC error name when !ok (NVRTC_ERROR_COMPILATION, ...)
  std::string log;       // the program log, verbatim (line numbers included)
  std::string cubin;     // bytes
  std::string ptx;       // the PTX it was built from (audited in the parent)
  std::string lowered_name;  // the entry's symbol in the CUBIN
  double compile_ms = 0.0;
};

// Loads NVRTC from the first path that opens. `builtins` are dlopened first with
// RTLD_GLOBAL: the wheel's libnvrtc cannot find libnvrtc-builtins on its own.
// Returns the path that loaded. Idempotent.
std::string load_nvrtc(const std::vector<std::string>& candidates,
                       const std::vector<std::string>& builtins);

// (major, minor) of the loaded NVRTC.
std::pair<int, int> nvrtc_version();

// Compiles `source` for `arch` (e.g. "sm_90"); `entry` is added as a name
// expression so C++ (mangled) and extern "C" kernels both resolve. A compile
// error is a result with ok=false and the log, not an exception.
CompileResult compile(const std::string& source, const std::string& filename,
                      const std::string& entry, const std::vector<std::string>& options,
                      const std::string& arch);

}  // namespace ws
