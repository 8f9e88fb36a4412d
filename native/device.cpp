#include "device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ws {
namespace {

int attribute(CUdevice dev, CUdevice_attribute attr) {
  int value = 0;
  // Some attributes are deprecated in CUDA 13 drivers; a missing one reads as 0.
  if (driver().cuDeviceGetAttribute(&value, attr, dev) != CUDA_SUCCESS) return 0;
  return value;
}

std::string format_uuid(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char text[64];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

}  // namespace

Device::Device(int ordinal) {
  const Driver& d = driver();
  int count = 0;
  WS_CU(d.cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count)
    throw CudaError("CUDA_ERROR_INVALID_DEVICE",
                    "GPU " + std::to_string(ordinal) + " requested but " +
                        std::to_string(count) + " visible",
                    "Device", CUDA_ERROR_INVALID_DEVICE);
  WS_CU(d.cuDeviceGet(&dev_, ordinal));
  WS_CU(d.cuDevicePrimaryCtxRetain(&ctx_, dev_));
  WS_CU(d.cuCtxSetCurrent(ctx_));
  // A blocking stream: the synchronous memsets and copies (legacy default stream)
  // that poison outputs, arm guards and reset checker counters are ordered
  // before the next launch on it, and downloads after it.
  WS_CU(d.cuStreamCreate(&stream_, CU_STREAM_DEFAULT));

  DeviceFacts& f = facts_;
  f.ordinal = ordinal;
  char name[256] = {0};
  WS_CU(d.cuDeviceGetName(name, sizeof name, dev_));
  f.name = name;
  CUuuid uuid;
  if (d.cuDeviceGetUuid(&uuid, dev_) == CUDA_SUCCESS) f.uuid = format_uuid(uuid);
  WS_CU(d.cuDriverGetVersion(&f.driver_version));
  size_t total = 0;
  WS_CU(d.cuDeviceTotalMem(&total, dev_));
  f.total_memory = static_cast<int64_t>(total);
  f.cc_major = attribute(dev_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  f.cc_minor = attribute(dev_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  f.arch = "sm_" + std::to_string(f.cc_major) + std::to_string(f.cc_minor);
  f.sm_count = attribute(dev_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  f.l2_bytes = attribute(dev_, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  f.smem_per_block = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  f.smem_per_block_optin = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  f.smem_per_sm = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  f.regs_per_block = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  f.regs_per_sm = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  f.max_threads_per_block = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  f.max_threads_per_sm = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  f.max_blocks_per_sm = attribute(dev_, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  f.warp_size = attribute(dev_, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  f.sm_clock_khz = attribute(dev_, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  f.mem_clock_khz = attribute(dev_, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  f.mem_bus_bits = attribute(dev_, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  // Double data rate: two transfers per memory clock.
  f.peak_bandwidth_gbs = 2.0 * f.mem_clock_khz * 1e3 * (f.mem_bus_bits / 8.0) / 1e9;

  // nvbench sizes its flush from the real L2; twice it so no line survives.
  flush_bytes_ = std::max<size_t>(2 * static_cast<size_t>(f.l2_bytes), 64u << 20);
  flush_bytes_ = (flush_bytes_ + (2u << 20) - 1) / (2u << 20) * (2u << 20);  // whole 2 MiB pages (agent/worker/pages.py)
  WS_CU(d.cuMemAlloc(&flush_, flush_bytes_));
}

Device::~Device() {
  const Driver& d = driver();
  d.cuCtxSetCurrent(ctx_);
  if (flush_module_) warn_if_failed(d.cuModuleUnload(flush_module_), "cuModuleUnload(flush)");
  if (flush_) warn_if_failed(d.cuMemFree(flush_), "cuMemFree(flush)");
  if (stream_) warn_if_failed(d.cuStreamDestroy(stream_), "cuStreamDestroy");
  if (ctx_) warn_if_failed(d.cuDevicePrimaryCtxRelease(dev_), "cuDevicePrimaryCtxRelease");
}

void Device::make_current() const { WS_CU(driver().cuCtxSetCurrent(ctx_)); }

void Device::synchronize() const {
  make_current();
  WS_CU(driver().cuStreamSynchronize(stream_));
}

int64_t Device::stack_limit() const {
  const Driver& d = driver();
  make_current();
  size_t stack = 0;
  WS_CU(d.cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
  return static_cast<int64_t>(stack);
}

void Device::flush_l2() {
  const Driver& d = driver();
  // A changing value keeps the write from being a no-op the hardware could skip.
  ++flush_value_;
  if (!flush_write_) {
    WS_CU(d.cuMemsetD32Async(flush_, flush_value_, flush_bytes_ / 4, stream_));
    return;
  }
  CUdeviceptr buf = flush_;
  unsigned long long vectors = flush_bytes_ / 16, lines = flush_bytes_ / 128;
  unsigned value = flush_value_;
  void* write_args[] = {&buf, &vectors, &value};
  void* demote_args[] = {&buf, &lines};
  const unsigned blocks = static_cast<unsigned>(facts_.sm_count) * 4, threads = 256;
  WS_CU(d.cuLaunchKernel(flush_write_, blocks, 1, 1, threads, 1, 1, 0, stream_, write_args, nullptr));
  WS_CU(d.cuLaunchKernel(flush_demote_, blocks, 1, 1, threads, 1, 1, 0, stream_, demote_args, nullptr));
}

void Device::load_l2_flush(const std::string& cubin) {
  const Driver& d = driver();
  make_current();
  CUmodule module = nullptr;
  WS_CU(d.cuModuleLoadData(&module, cubin.data()));
  CUfunction write = nullptr, demote = nullptr;
  CUresult found = d.cuModuleGetFunction(&write, module, "warpsmith_l2_write");
  if (found == CUDA_SUCCESS) found = d.cuModuleGetFunction(&demote, module, "warpsmith_l2_demote");
  if (found != CUDA_SUCCESS) {
    warn_if_failed(d.cuModuleUnload(module), "cuModuleUnload(flush)");
    check(found, "cuModuleGetFunction(warpsmith_l2_write, warpsmith_l2_demote)");
  }
  if (flush_module_) warn_if_failed(d.cuModuleUnload(flush_module_), "cuModuleUnload(flush)");
  flush_module_ = module;
  flush_write_ = write;
  flush_demote_ = demote;
}

namespace {

CUmemAllocationProp device_memory(CUdevice dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = static_cast<int>(dev);
  return prop;
}

CUresult set_access(CUdevice dev, CUdeviceptr ptr, size_t bytes, CUmemAccess_flags flags) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = static_cast<int>(dev);
  access.flags = flags;
  return driver().cuMemSetAccess(ptr, bytes, &access, 1);
}

}  // namespace

Buffer::Buffer(std::shared_ptr<Device> device, size_t bytes, bool protectable)
    : device_(std::move(device)), bytes_(bytes) {
  const Driver& d = driver();
  device_->make_current();
  if (!protectable) {
    WS_CU(d.cuMemAlloc(&ptr_, bytes == 0 ? 1 : bytes));
    return;
  }
  CUmemAllocationProp prop = device_memory(device_->handle());
  size_t granule = 0;
  WS_CU(d.cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t mapped = (std::max<size_t>(bytes, 1) + granule - 1) / granule * granule;
  // Each step undone if a later one fails: the constructor throws with nothing held.
  WS_CU(d.cuMemAddressReserve(&ptr_, mapped, 0, 0, 0));
  CUresult r = d.cuMemCreate(&handle_, mapped, &prop, 0);
  if (r == CUDA_SUCCESS) {
    r = d.cuMemMap(ptr_, mapped, 0, handle_, 0);
    if (r == CUDA_SUCCESS) {
      r = set_access(device_->handle(), ptr_, mapped, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
      if (r != CUDA_SUCCESS) d.cuMemUnmap(ptr_, mapped);
    }
    if (r != CUDA_SUCCESS) d.cuMemRelease(handle_);
  }
  if (r != CUDA_SUCCESS) {
    d.cuMemAddressFree(ptr_, mapped);
    ptr_ = 0;
    handle_ = 0;
    check(r, "cuMemCreate/cuMemMap/cuMemSetAccess");
  }
  mapped_ = mapped;
}

Buffer::~Buffer() {
  if (!ptr_) return;
  const Driver& d = driver();
  device_->make_current();
  if (!handle_) {
    warn_if_failed(d.cuMemFree(ptr_), "cuMemFree");
    return;
  }
  warn_if_failed(d.cuMemUnmap(ptr_, mapped_), "cuMemUnmap");
  warn_if_failed(d.cuMemRelease(handle_), "cuMemRelease");
  warn_if_failed(d.cuMemAddressFree(ptr_, mapped_), "cuMemAddressFree");
}

void Buffer::set_read_only(bool read_only) {
  if (!handle_)
    throw CudaError("CUDA_ERROR_NOT_SUPPORTED", "set_read_only needs a buffer allocated protectable",
                    "set_read_only", CUDA_ERROR_NOT_SUPPORTED);
  device_->synchronize();  // no launch in flight reads or writes it while its mapping changes
  WS_CU(set_access(device_->handle(), ptr_, mapped_,
                   read_only ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  read_only_ = read_only;
}

void Buffer::check_range(size_t offset, size_t bytes, const char* what) const {
  if (offset + bytes > bytes_ || offset + bytes < offset)
    throw CudaError("CUDA_ERROR_INVALID_VALUE",
                    std::string(what) + " of " + std::to_string(bytes) + " bytes at offset " +
                        std::to_string(offset) + " overruns a " + std::to_string(bytes_) +
                        "-byte buffer",
                    what, CUDA_ERROR_INVALID_VALUE);
}

void Buffer::upload(const void* src, size_t bytes, size_t offset) {
  check_range(offset, bytes, "upload");
  device_->synchronize();  // the stream may still read this buffer
  WS_CU(driver().cuMemcpyHtoD(ptr_ + offset, src, bytes));
}

void Buffer::upload_async(const void* src, size_t bytes, size_t offset) {
  check_range(offset, bytes, "upload_async");
  device_->make_current();
  WS_CU(driver().cuMemcpyHtoDAsync(ptr_ + offset, src, bytes, device_->stream()));
}

void Buffer::download(void* dst, size_t bytes, size_t offset) const {
  check_range(offset, bytes, "download");
  device_->synchronize();
  WS_CU(driver().cuMemcpyDtoH(dst, ptr_ + offset, bytes));
}

void Buffer::fill_u32(uint32_t value, size_t offset, size_t bytes) {
  check_range(offset, bytes, "fill_u32");
  if (offset % 4 || bytes % 4)
    throw CudaError("CUDA_ERROR_INVALID_VALUE", "fill_u32 needs 4-byte aligned offset and size",
                    "fill_u32", CUDA_ERROR_INVALID_VALUE);
  device_->synchronize();
  WS_CU(driver().cuMemsetD32(ptr_ + offset, value, bytes / 4));
}

void Buffer::fill_u32_async(uint32_t value, size_t offset, size_t bytes) {
  check_range(offset, bytes, "fill_u32_async");
  if (offset % 4 || bytes % 4)
    throw CudaError("CUDA_ERROR_INVALID_VALUE", "fill_u32_async needs 4-byte aligned offset and size",
                    "fill_u32_async", CUDA_ERROR_INVALID_VALUE);
  device_->make_current();
  WS_CU(driver().cuMemsetD32Async(ptr_ + offset, value, bytes / 4, device_->stream()));
}

void Buffer::fill_u8(uint8_t value, size_t offset, size_t bytes) {
  check_range(offset, bytes, "fill_u8");
  device_->synchronize();
  WS_CU(driver().cuMemsetD8(ptr_ + offset, value, bytes));
}

Module::Module(std::shared_ptr<Device> device, const std::string& image)
    : device_(std::move(device)) {
  device_->make_current();
  WS_CU(driver().cuModuleLoadData(&module_, image.data()));
}

Module::~Module() {
  if (!module_) return;
  device_->make_current();
  warn_if_failed(driver().cuModuleUnload(module_), "cuModuleUnload");
}

Function Module::function(const std::string& name) {
  const Driver& d = driver();
  device_->make_current();
  Function fn;
  fn.module = shared_from_this();
  fn.name = name;
  WS_CU(d.cuModuleGetFunction(&fn.handle, module_, name.c_str()));
  d.cuFuncGetAttribute(&fn.info.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, fn.handle);
  d.cuFuncGetAttribute(&fn.info.static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn.handle);
  d.cuFuncGetAttribute(&fn.info.local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn.handle);
  d.cuFuncGetAttribute(&fn.info.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn.handle);
  d.cuFuncGetAttribute(&fn.info.const_bytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, fn.handle);
  return fn;
}

void KernelArgs::push(const void* v, size_t n) {
  Slot slot{};
  std::memcpy(slot.bytes, v, n);
  slots_.push_back(slot);
}

void** KernelArgs::pointers() {
  ptrs_.clear();
  for (auto& s : slots_) ptrs_.push_back(&s);
  return ptrs_.data();
}

void launch(Device& device, const Function& fn, const LaunchConfig& cfg, KernelArgs& args) {
  const Driver& d = driver();
  device.make_current();
  if (cfg.shared_bytes > 48u * 1024u)
    // Dynamic shared memory above 48 KiB must be opted into per function.
    WS_CU(d.cuFuncSetAttribute(fn.handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(cfg.shared_bytes)));
  if (!cfg.clustered()) {
    WS_CU(d.cuLaunchKernel(fn.handle, cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x,
                           cfg.block.y, cfg.block.z, cfg.shared_bytes, device.stream(),
                           args.pointers(), nullptr));
    return;
  }
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = cfg.cluster.x;
  attr.value.clusterDim.y = cfg.cluster.y;
  attr.value.clusterDim.z = cfg.cluster.z;
  CUlaunchConfig lc{};
  lc.gridDimX = cfg.grid.x;
  lc.gridDimY = cfg.grid.y;
  lc.gridDimZ = cfg.grid.z;
  lc.blockDimX = cfg.block.x;
  lc.blockDimY = cfg.block.y;
  lc.blockDimZ = cfg.block.z;
  lc.sharedMemBytes = cfg.shared_bytes;
  lc.hStream = device.stream();
  lc.attrs = &attr;
  lc.numAttrs = 1;
  WS_CU(d.cuLaunchKernelEx(&lc, fn.handle, args.pointers(), nullptr));
}

}  // namespace ws
