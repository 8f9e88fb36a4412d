// One exception type for every CUDA / NVRTC / cuBLAS failure. It carries the
// error's symbolic name (CUDA_ERROR_ILLEGAL_ADDRESS), its text and the call that
// failed, so the Python side can classify failures without parsing prose.
#pragma once
#include <stdexcept>
#include <string>

namespace ws {

class CudaError : public std::runtime_error {
 public:
  CudaError(std::string name, std::string text, std::string call, int code)
      : std::runtime_error(name + ": " + text + " (in " + call + ")"),
        name_(std::move(name)), text_(std::move(text)), call_(std::move(call)), code_(code) {}
  const std::string& name() const { return name_; }
  const std::string& text() const { return text_; }
  const std::string& call() const { return call_; }
  int code() const { return code_; }

 private:
  std::string name_, text_, call_;
  int code_;
};

}  // namespace ws
