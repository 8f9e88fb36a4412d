#include "tensor_map.hpp"

namespace ws {
namespace {

void refuse(const std::string& why) {
  throw CudaError("CUDA_ERROR_INVALID_VALUE", why, "cuTensorMapEncodeTiled",
                  CUDA_ERROR_INVALID_VALUE);
}

CUtensorMapDataType data_type(const std::string& dtype, uint32_t& itemsize) {
  if (dtype == "bfloat16") return itemsize = 2, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  if (dtype == "float16") return itemsize = 2, CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (dtype == "float32") return itemsize = 4, CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  if (dtype == "float64") return itemsize = 8, CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
  if (dtype == "int32") return itemsize = 4, CU_TENSOR_MAP_DATA_TYPE_INT32;
  if (dtype == "int64") return itemsize = 8, CU_TENSOR_MAP_DATA_TYPE_INT64;
  // fp8 has no tensor-map type of its own: the copy engine moves bytes, zero-filled past the
  // edge, and a zero byte is +0 in both formats.
  if (dtype == "float8_e4m3fn" || dtype == "float8_e5m2") return itemsize = 1, CU_TENSOR_MAP_DATA_TYPE_UINT8;
  refuse("a tensor map's dtype must be float8_e4m3fn, float8_e5m2, bfloat16, float16, float32, float64, "
         "int32 or int64, not " + dtype);
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

CUtensorMapSwizzle swizzle(int bytes) {
  switch (bytes) {
    case 0: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: refuse("a tensor map's swizzle must be 0, 32, 64 or 128 bytes, not " +
                    std::to_string(bytes));
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

}  // namespace

CUtensorMap encode_tensor_map(const TensorMapSpec& s) {
  uint32_t itemsize = 0;
  CUtensorMapDataType type = data_type(s.dtype, itemsize);
  // Innermost dimension first, as the driver counts them.
  cuuint64_t dims[2] = {s.cols, s.rows};
  cuuint64_t strides[1] = {s.cols * itemsize};
  cuuint32_t box[2] = {s.box_cols, s.box_rows};
  cuuint32_t element_strides[2] = {1, 1};
  CUtensorMap map{};
  CUresult r = driver().cuTensorMapEncodeTiled(
      &map, type, 2, reinterpret_cast<void*>(s.address), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle(s.swizzle_bytes), CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string call = "cuTensorMapEncodeTiled(" + s.dtype + "[" + std::to_string(s.rows) + ", " +
                       std::to_string(s.cols) + "], box " + std::to_string(s.box_rows) + "x" +
                       std::to_string(s.box_cols) + ", swizzle " +
                       std::to_string(s.swizzle_bytes) + " B)";
    check(r, call.c_str());
  }
  return map;
}

}  // namespace ws
