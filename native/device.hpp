// One GPU: its primary context, a stream, device memory, modules and launches.
// Move-only owners for every driver handle; destructors never throw.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver.hpp"

namespace ws {

struct DeviceFacts {
  int ordinal = 0;
  std::string name, uuid, arch;  // arch: "sm_90"
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  int driver_version = 0;  // 13000 = CUDA 13.0
  int64_t total_memory = 0, l2_bytes = 0;
  int smem_per_block = 0, smem_per_block_optin = 0, smem_per_sm = 0;
  int regs_per_block = 0, regs_per_sm = 0, max_threads_per_block = 0,
      max_threads_per_sm = 0, max_blocks_per_sm = 0, warp_size = 0;
  int sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_bits = 0;
  double peak_bandwidth_gbs = 0.0;  // from clock x bus width; a lead, not a measurement
};

class Device {
 public:
  explicit Device(int ordinal);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceFacts& facts() const { return facts_; }
  void make_current() const;
  CUstream stream() const { return stream_; }
  CUdevice handle() const { return dev_; }
  void synchronize() const;
  // The context's per-thread stack now (CU_LIMIT_STACK_SIZE): the driver raises it for a
  // launch that needs more and never lowers it, so a fact read at start goes stale.
  int64_t stack_limit() const;
  // Overwrites a buffer of at least twice the L2 on the stream, evicting the
  // previous launch's data so the next launch starts cold: with the flush kernels when
  // they are installed, else with a memset (which leaves evict_last lines in place).
  void flush_l2();
  // Loads the flush kernels' CUBIN (agent/runtime/cuda/l2_flush.cu): warpsmith_l2_write
  // fills the buffer under an evict_last policy, warpsmith_l2_demote returns its lines
  // to evict_normal.
  void load_l2_flush(const std::string& cubin);
  size_t flush_bytes() const { return flush_bytes_; }
  uint64_t flush_ptr() const { return static_cast<uint64_t>(flush_); }

 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUdeviceptr flush_ = 0;
  size_t flush_bytes_ = 0;
  unsigned flush_value_ = 0;
  CUmodule flush_module_ = nullptr;
  CUfunction flush_write_ = nullptr, flush_demote_ = nullptr;
  DeviceFacts facts_;
};

// Device memory. A protectable buffer is mapped through the virtual memory API
// (cuMemCreate + cuMemMap) instead of cuMemAlloc, so that its kernels' access can be
// set to read-only: a candidate's write into an input then faults instead of landing.
class Buffer {
 public:
  Buffer(std::shared_ptr<Device> device, size_t bytes, bool protectable = false);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* src, size_t bytes, size_t offset);
  // Enqueued on the device's stream without waiting for it: the driver stages pageable
  // host memory before returning, so src may go as soon as this returns.
  void upload_async(const void* src, size_t bytes, size_t offset);
  void download(void* dst, size_t bytes, size_t offset) const;
  void fill_u32(uint32_t value, size_t offset, size_t bytes);
  // Enqueued on the device's stream, no synchronisation: for work inside a timing loop.
  void fill_u32_async(uint32_t value, size_t offset, size_t bytes);
  void fill_u8(uint8_t value, size_t offset, size_t bytes);
  // Kernels (and the driver's copies into it) may only read it, or read and write
  // again; waits for the stream first. Only for a protectable buffer.
  void set_read_only(bool read_only);
  bool protectable() const { return handle_ != 0; }
  bool read_only() const { return read_only_; }

 private:
  void check_range(size_t offset, size_t bytes, const char* what) const;
  std::shared_ptr<Device> device_;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  size_t mapped_ = 0;  // a protectable buffer's reserved and mapped bytes (whole granules)
  CUmemGenericAllocationHandle handle_ = 0;
  bool read_only_ = false;
};

struct FunctionInfo {
  int registers = 0, static_smem = 0, local_bytes = 0, max_threads = 0, const_bytes = 0;
};

class Module;

struct Function {
  std::shared_ptr<Module> module;  // keeps the CUmodule loaded while the function lives
  CUfunction handle = nullptr;
  std::string name;
  FunctionInfo info;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module(std::shared_ptr<Device> device, const std::string& image);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Function function(const std::string& name);

 private:
  std::shared_ptr<Device> device_;
  CUmodule module_ = nullptr;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  Dim3 grid, block;
  unsigned shared_bytes = 0;
  Dim3 cluster;  // thread block cluster (sm_90+); 1x1x1 launches without one
  bool clustered() const { return cluster.x * cluster.y * cluster.z > 1; }
};

// Kernel arguments packed in declaration order; each kept in its own 64-byte
// aligned slot, wide enough for a 128-byte CUtensorMap passed by value, so the
// pointers handed to cuLaunchKernel stay valid and aligned.
class KernelArgs {
 public:
  void add_pointer(uint64_t p) { push(&p, sizeof p); }
  void add_i32(int32_t v) { push(&v, sizeof v); }
  void add_i64(int64_t v) { push(&v, sizeof v); }
  void add_f32(float v) { push(&v, sizeof v); }
  void add_f64(double v) { push(&v, sizeof v); }
  void add_tensor_map(const CUtensorMap& map) { push(&map, sizeof map); }
  void** pointers();
  size_t size() const { return slots_.size(); }

 private:
  struct alignas(64) Slot {
    unsigned char bytes[128];
  };
  static_assert(sizeof(CUtensorMap) <= sizeof(Slot), "a CUtensorMap must fit one argument slot");
  void push(const void* v, size_t n);
  std::vector<Slot> slots_;
  std::vector<void*> ptrs_;
};

// Enqueues one launch on the device's stream (cuLaunchKernelEx with the cluster
// dimension attribute when cfg has a cluster). Launch-time errors (bad block size,
// too much shared memory, a grid not a multiple of the cluster) throw CudaError at
// once; faults surface at the next sync.
void launch(Device& device, const Function& fn, const LaunchConfig& cfg, KernelArgs& args);

}  // namespace ws
