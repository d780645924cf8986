#pragma once
// CUDA errors as exceptions, and whether there is a device at all.
//
// Every CUDA runtime call in multipack goes through MULTIPACK_CUDA_CHECK, which throws
// multipack::cuda_error naming the call, the error and file:line. Only the runtime API is
// used (no kernels), so these headers compile with the host compiler linked to CUDA's
// runtime, and with nvcc; nothing here includes range-v3, which nvcc cannot parse.

#include <cuda_runtime_api.h>

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
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

/// Throws cuda_error for anything but cudaSuccess, after clearing the runtime's last error:
/// a non-sticky error (a failed allocation, a bad argument) would otherwise be returned again
/// by the next unrelated call that checks cudaGetLastError (a kernel launch's check, say).
/// A sticky error (the context is lost) stays whatever is done. O(1).
inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  static_cast<void>(cudaGetLastError());
  throw cuda_error(code, std::string(call) + " failed: " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) +
                             ") at " + file + ":" + std::to_string(line));
}

/// CUDA calls that failed in destructors, which cannot throw: counted (cuda::destructor_errors()
/// reads the count) and, in debug builds (without NDEBUG), asserted, so that a failure to free
/// is seen where it happens rather than lost. The runtime's last error is cleared.
inline std::atomic<std::uint64_t>& destructor_error_count() noexcept {
  static std::atomic<std::uint64_t> count{0};
  return count;
}
inline void note_destructor_result(cudaError_t code, [[maybe_unused]] const char* call) noexcept {
  if (code == cudaSuccess) return;
  static_cast<void>(cudaGetLastError());
  destructor_error_count().fetch_add(1, std::memory_order_relaxed);
  assert(code == cudaSuccess && "a CUDA call in a destructor failed (see multipack::cuda::destructor_errors)");
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

/// The error to report for no device: the probe's (cudaErrorInsufficientDriver without a
/// driver, say), or cudaErrorNoDevice where the runtime counted none.
[[nodiscard]] inline cudaError_t no_device_error() noexcept {
  const cudaError_t probed = probe_devices().error;
  return probed != cudaSuccess ? probed : cudaErrorNoDevice;
}

}  // namespace detail

/// The number of CUDA devices this process can use: 0 without a driver or a device.
/// Probed once per process (see detail::probe_devices). Thread-safe, never throws; the first
/// call costs the runtime's start-up (up to a second with a driver).
[[nodiscard]] inline int device_count() noexcept { return detail::probe_devices().count; }

/// Whether a CUDA device can be used: device_count() > 0. Same cost and guarantees.
[[nodiscard]] inline bool device_available() noexcept { return device_count() > 0; }

/// CUDA calls that failed in multipack's destructors so far in this process (freeing memory,
/// destroying a stream or an event, waiting for a release before freeing): such a failure
/// cannot be thrown, so it is counted here (and asserted in debug builds). Thread-safe, O(1).
[[nodiscard]] inline std::uint64_t destructor_errors() noexcept {
  return multipack::detail::destructor_error_count().load(std::memory_order_relaxed);
}

/// A stream to queue work on, by reference (CCCL's cuda::stream_ref is the model): made from a
/// cudaStream_t or a cuda::stream, never from 0 or nullptr, which would silently mean the
/// legacy default stream (it synchronizes with every other blocking stream). Say that stream
/// explicitly: stream_ref::default_stream(). Trivially copyable; never owns.
class stream_ref {
 public:
  /// A stream the caller created (cudaStreamCreate*). Implicit, as CCCL's is.
  constexpr stream_ref(cudaStream_t stream) noexcept : handle_(stream) {}  // NOLINT(google-explicit-constructor)
  /// 0 or NULL: does not compile; say stream_ref::default_stream().
  stream_ref(int) = delete;
  /// nullptr: does not compile; say stream_ref::default_stream().
  stream_ref(std::nullptr_t) = delete;

  /// The legacy default stream, chosen on purpose.
  [[nodiscard]] static constexpr stream_ref default_stream() noexcept { return stream_ref(detail_default{}); }

  [[nodiscard]] constexpr cudaStream_t get() const noexcept { return handle_; }
  [[nodiscard]] friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept { return a.handle_ == b.handle_; }

 private:
  struct detail_default {};
  constexpr explicit stream_ref(detail_default) noexcept : handle_(nullptr) {}
  cudaStream_t handle_;
};

/// Why there is no device, for messages: "" when there is one, else the runtime's answer
/// ("cudaErrorInsufficientDriver: CUDA driver version is insufficient ...", or "no device").
[[nodiscard]] inline std::string no_device_reason() {
  const detail::device_probe& p = detail::probe_devices();
  if (p.count > 0) return "";
  if (p.error == cudaSuccess) return "the driver reports no CUDA device (cudaErrorNoDevice)";  // as code() says
  return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(p.error) + " (" + cudaGetErrorString(p.error) + ")";
}

}  // namespace multipack::cuda
