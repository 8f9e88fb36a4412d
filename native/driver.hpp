// The CUDA Driver API, loaded from libcuda.so.1 at run time so the module imports
// on a machine without a GPU. One table of entry points, one check().
#pragma once
#include <cuda.h>

#include <string>

#include "dynlib.hpp"

namespace ws {

#define WS_DRIVER_FUNCTIONS(X)                                                     \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)            \
  X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName) X(cuDeviceGetAttribute)    \
  X(cuDeviceTotalMem) X(cuDeviceGetUuid) X(cuDevicePrimaryCtxRetain)              \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuCtxGetLimit) \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                      \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoH) X(cuMemsetD8)         \
  X(cuMemsetD32) X(cuMemsetD32Async) X(cuMemGetInfo)                              \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetAttribute) \
  X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuEventCreate)      \
  X(cuEventDestroy) X(cuTensorMapEncodeTiled)                                     \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)                    \
  X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease)                 \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)  \
  X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle) X(cuIpcGetEventHandle) \
  X(cuIpcOpenEventHandle) X(cuStreamWaitEvent) X(cuEventQuery) X(cuMemGetAddressRange)

struct Driver {
#define WS_DECLARE(fn) decltype(&::fn) fn = nullptr;
  WS_DRIVER_FUNCTIONS(WS_DECLARE)
#undef WS_DECLARE
};

// Loads libcuda and calls cuInit once; throws CudaError (CUDA_ERROR_NO_DEVICE,
// NO_DRIVER, ...) with a sentence that says what to do.
const Driver& driver();

// Throws CudaError carrying the error's name when r is not CUDA_SUCCESS.
void check(CUresult r, const char* call);

// Name of a driver error, safe to call from destructors.
std::string error_name(CUresult r);

// For destructors, which must not throw: a failed cleanup call reported on stderr.
void warn_if_failed(CUresult r, const char* call);

}  // namespace ws

#define WS_CU(call) ::ws::check((call), #call)
