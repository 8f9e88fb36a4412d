// TMA descriptors (CUtensorMap) for Hopper's bulk tensor copies, encoded by the
// driver from a device buffer, its 2-D shape and the box one copy moves.
#pragma once
#include <cstdint>
#include <string>

#include "driver.hpp"

namespace ws {

struct TensorMapSpec {
  uint64_t address = 0;   // the array's first element (16-byte aligned)
  std::string dtype;      // float8_e4m3fn | float8_e5m2 | bfloat16 | float16 | float32 | float64 | int32 | int64
  uint64_t rows = 0, cols = 0;          // row-major shape; cols is the contiguous dimension
  uint32_t box_rows = 0, box_cols = 0;  // the tile one cp.async.bulk.tensor moves
  int swizzle_bytes = 0;                // 0 (none), 32, 64 or 128
};

// cuTensorMapEncodeTiled with no interleave, L2 promotion of 128 B and zero fill
// out of bounds; throws CudaError (CUDA_ERROR_INVALID_VALUE ...) naming the shape.
CUtensorMap encode_tensor_map(const TensorMapSpec& spec);

}  // namespace ws
