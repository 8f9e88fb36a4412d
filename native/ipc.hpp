// CUDA IPC: device memory and events of one process opened in another process's context.
// A checking process with a context of its own reads a candidate's outputs through these,
// and orders its checks after the candidate's launches (and the candidate's next launch
// after its checks) without sharing the candidate's context.
#pragma once
#include <cuda.h>

#include <memory>
#include <string>

#include "device.hpp"

namespace ws {

// An event another process can open: created here (interprocess, no timing) or opened
// from the handle of one created in another process.
class IpcEvent {
 public:
  explicit IpcEvent(std::shared_ptr<Device> device);
  IpcEvent(std::shared_ptr<Device> device, const std::string& handle);
  ~IpcEvent();
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;

  std::string handle() const;  // CU_IPC_HANDLE_SIZE bytes to send to the other process
  void record();               // on the device's stream
  // The device's stream waits for the last record made before this call, in whichever
  // process: a handle is sent to the waiting process only after its record.
  void wait();
  void synchronize();          // the host waits for the last record
  bool done();                 // whether the last record has completed

 private:
  std::shared_ptr<Device> device_;
  CUevent event_ = nullptr;
  bool opened_ = false;
};

// The IPC handle of a buffer allocated with cuMemAlloc (not a protectable one). The other
// process's mapping is valid while the buffer lives: the exporter keeps it until then.
std::string ipc_memory_handle(const Device& device, const Buffer& buffer);

// Another process's buffer mapped into this context, until this is destroyed.
class IpcMapping {
 public:
  IpcMapping(std::shared_ptr<Device> device, const std::string& handle, size_t bytes);
  ~IpcMapping();
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void download(void* dst, size_t bytes, size_t offset) const;

 private:
  std::shared_ptr<Device> device_;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

}  // namespace ws
