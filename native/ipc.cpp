#include "ipc.hpp"

#include <cstring>

#include "driver.hpp"

namespace ws {
namespace {

template <typename Handle>
Handle handle_from(const std::string& bytes, const char* what) {
  Handle h{};
  if (bytes.size() != sizeof h.reserved)
    throw CudaError("CUDA_ERROR_INVALID_VALUE",
                    std::string(what) + " handle of " + std::to_string(bytes.size()) + " bytes, not " +
                        std::to_string(sizeof h.reserved),
                    what, CUDA_ERROR_INVALID_VALUE);
  std::memcpy(h.reserved, bytes.data(), sizeof h.reserved);
  return h;
}

template <typename Handle>
std::string bytes_of(const Handle& h) {
  return std::string(reinterpret_cast<const char*>(h.reserved), sizeof h.reserved);
}

}  // namespace

IpcEvent::IpcEvent(std::shared_ptr<Device> device) : device_(std::move(device)) {
  device_->make_current();
  WS_CU(driver().cuEventCreate(&event_, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
}

IpcEvent::IpcEvent(std::shared_ptr<Device> device, const std::string& handle)
    : device_(std::move(device)), opened_(true) {
  device_->make_current();
  WS_CU(driver().cuIpcOpenEventHandle(&event_, handle_from<CUipcEventHandle>(handle, "cuIpcOpenEventHandle")));
}

IpcEvent::~IpcEvent() {
  if (!event_) return;
  device_->make_current();
  warn_if_failed(driver().cuEventDestroy(event_), "cuEventDestroy(ipc)");
}

std::string IpcEvent::handle() const {
  if (opened_)
    throw CudaError("CUDA_ERROR_INVALID_HANDLE", "an event opened from another process has no handle to give",
                    "cuIpcGetEventHandle", CUDA_ERROR_INVALID_HANDLE);
  device_->make_current();
  CUipcEventHandle h{};
  WS_CU(driver().cuIpcGetEventHandle(&h, event_));
  return bytes_of(h);
}

void IpcEvent::record() {
  device_->make_current();
  WS_CU(driver().cuEventRecord(event_, device_->stream()));
}

void IpcEvent::wait() {
  device_->make_current();
  WS_CU(driver().cuStreamWaitEvent(device_->stream(), event_, 0));
}

void IpcEvent::synchronize() {
  device_->make_current();
  WS_CU(driver().cuEventSynchronize(event_));
}

bool IpcEvent::done() {
  device_->make_current();
  CUresult r = driver().cuEventQuery(event_);
  if (r == CUDA_ERROR_NOT_READY) return false;
  WS_CU(r);
  return true;
}

std::string ipc_memory_handle(const Device& device, const Buffer& buffer) {
  if (buffer.protectable())
    throw CudaError("CUDA_ERROR_NOT_SUPPORTED",
                    "a protectable buffer is mapped through the virtual memory API, which cuIpcGetMemHandle "
                    "does not export",
                    "cuIpcGetMemHandle", CUDA_ERROR_NOT_SUPPORTED);
  device.make_current();
  CUipcMemHandle h{};
  WS_CU(driver().cuIpcGetMemHandle(&h, buffer.ptr()));
  return bytes_of(h);
}

IpcMapping::IpcMapping(std::shared_ptr<Device> device, const std::string& handle, size_t bytes)
    : device_(std::move(device)), bytes_(bytes) {
  device_->make_current();
  WS_CU(driver().cuIpcOpenMemHandle(&ptr_, handle_from<CUipcMemHandle>(handle, "cuIpcOpenMemHandle"),
                                    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  // The mapping is the exporter's whole allocation: `bytes` may not claim more of it.
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = driver().cuMemGetAddressRange(&base, &size, ptr_);
  if (r != CUDA_SUCCESS || base != ptr_ || size < bytes) {
    warn_if_failed(driver().cuIpcCloseMemHandle(ptr_), "cuIpcCloseMemHandle");
    ptr_ = 0;
    if (r != CUDA_SUCCESS) check(r, "cuMemGetAddressRange");
    throw CudaError("CUDA_ERROR_INVALID_VALUE",
                    "the mapped allocation holds " + std::to_string(size) + " bytes, not the " + std::to_string(bytes) +
                        " asked for",
                    "cuIpcOpenMemHandle", CUDA_ERROR_INVALID_VALUE);
  }
}

IpcMapping::~IpcMapping() {
  if (!ptr_) return;
  device_->make_current();
  warn_if_failed(driver().cuIpcCloseMemHandle(ptr_), "cuIpcCloseMemHandle");
}

void IpcMapping::download(void* dst, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_ || offset + bytes < offset)
    throw CudaError("CUDA_ERROR_INVALID_VALUE",
                    "download of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                        " overruns a " + std::to_string(bytes_) + "-byte mapping",
                    "download", CUDA_ERROR_INVALID_VALUE);
  device_->synchronize();
  WS_CU(driver().cuMemcpyDtoH(dst, ptr_ + offset, bytes));
}

}  // namespace ws
