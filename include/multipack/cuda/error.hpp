#pragma once
// CUDA errors as exceptions, and whether there is a device at all.
//
// Every CUDA runtime call in multipack goes through MULTIPACK_CUDA_CHECK, which throws
// multipack::cuda_error naming the call, the error and file:line. Only the runtime API is
// used (no kernels), so these headers compile with the host compiler linked to CUDA's
// runtime, and with nvcc; nothing here includes range-v3, which nvcc cannot parse.

#include <cuda_runtime_api.h>

#include <string>

#include "multipack/core/error.hpp"

namespace multipack {

/// A CUDA runtime call failed. The message names the call, the error's name and text, and
/// the file and line of the call; code() is the runtime's error.
class cuda_error : public error {
 public:
  cuda_error(cudaError_t code, const std::string& what) : error(what), code_(code) {}
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {

/// Throws cuda_error for anything but cudaSuccess. O(1).
inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  throw cuda_error(code, std::string(call) + " failed: " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) +
                             ") at " + file + ":" + std::to_string(line));
}

}  // namespace detail
}  // namespace multipack

/// Calls a CUDA runtime function and throws multipack::cuda_error unless it succeeded.
#define MULTIPACK_CUDA_CHECK(call) ::multipack::detail::check_cuda((call), #call, __FILE__, __LINE__)

namespace multipack::cuda {

namespace detail {

/// What asking the runtime for its devices answered: the count, or why there is none.
struct device_probe {
  int count = 0;
  cudaError_t error = cudaSuccess;  ///< cudaGetDeviceCount's result (cudaErrorInsufficientDriver: no driver)
};

/// The probe, made once per process and cached: without a driver every runtime call fails
/// with cudaErrorInsufficientDriver and the error never clears, so asking again is useless.
inline const device_probe& probe_devices() noexcept {
  static const device_probe probe = [] {
    device_probe p;
    p.error = cudaGetDeviceCount(&p.count);
    if (p.error != cudaSuccess) p.count = 0;
    static_cast<void>(cudaGetLastError());  // the probe's failure is an answer, not a pending error
    return p;
  }();
  return probe;
}

}  // namespace detail

/// The number of CUDA devices this process can use: 0 without a driver or a device.
/// Probed once per process (see detail::probe_devices). Thread-safe, never throws; the first
/// call costs the runtime's start-up (up to a second with a driver).
[[nodiscard]] inline int device_count() noexcept { return detail::probe_devices().count; }

/// Whether a CUDA device can be used: device_count() > 0. Same cost and guarantees.
[[nodiscard]] inline bool device_available() noexcept { return device_count() > 0; }

/// Why there is no device, for messages: "" when there is one, else the runtime's answer
/// ("cudaErrorInsufficientDriver: CUDA driver version is insufficient ...", or "no device").
[[nodiscard]] inline std::string no_device_reason() {
  const detail::device_probe& p = detail::probe_devices();
  if (p.count > 0) return "";
  if (p.error == cudaSuccess) return "the driver reports no CUDA device";
  return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(p.error) + " (" + cudaGetErrorString(p.error) + ")";
}

}  // namespace multipack::cuda
