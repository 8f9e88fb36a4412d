// dlopen/dlsym with errors that say which library or symbol is missing.
#pragma once
#include <dlfcn.h>
#include <string>
#include <vector>

#include "errors.hpp"

namespace ws {

// Expands a CUDA header macro (cuMemAlloc -> cuMemAlloc_v2) before stringising,
// so dlsym asks for the same versioned entry point the header's prototype names.
#define WS_STR_(x) #x
#define WS_STR(x) WS_STR_(x)

class DynLib {
 public:
  DynLib() = default;
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;
  // Tries each candidate in order; the first that loads wins. Returns false and
  // fills `why` with every dlerror when none loads.
  bool open(const std::vector<std::string>& candidates, int flags, std::string& why) {
    for (const auto& c : candidates) {
      handle_ = dlopen(c.c_str(), flags);
      if (handle_) {
        path_ = c;
        return true;
      }
      const char* e = dlerror();
      why += (why.empty() ? "" : "; ") + std::string(e ? e : c.c_str());
    }
    return false;
  }
  template <typename Fn>
  void load(Fn& fn, const char* symbol, const char* library_kind) {
    fn = reinterpret_cast<Fn>(dlsym(handle_, symbol));
    if (!fn)
      throw CudaError("SYMBOL_NOT_FOUND",
                      std::string(library_kind) + " at " + path_ + " lacks " + symbol +
                          " (is it older than the headers warpsmith was built with?)",
                      "dlsym", -1);
  }
  bool loaded() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;  // never dlclosed: CUDA libraries do not survive unloading
  std::string path_;
};

}  // namespace ws
