#pragma once
// CUDA resources that own themselves: a stream, an event, device memory, and pinned host
// memory as a std::pmr::memory_resource (which the batch loader allocates its buffers from).
// Each is created once and reused: page-locking runs at about 1-2 GB/s and cudaMalloc
// synchronizes the device, so neither belongs in a per-batch path.
//
// Constructors throw multipack::cuda_error naming the failed call. Destructors never throw: a
// failure to free is counted (cuda::destructor_errors()) and asserted in debug builds. Each
// resource remembers the device current when it was made, and makes it current (for the call
// only) wherever it calls CUDA, so that a thread with another device current can still
// synchronize, record or free it. None is thread-safe to mutate; all may be used from any
// thread the CUDA runtime allows.

#include <cuda_runtime_api.h>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <new>
#include <string>
#include <utility>

#include "multipack/core/error.hpp"
#include "multipack/cuda/error.hpp"

namespace multipack::cuda {

namespace detail {

/// The device current on the calling thread. Throws cuda_error.
[[nodiscard]] inline int current_device() {
  int device = 0;
  MULTIPACK_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

/// Makes `device` current on the calling thread for the scope, then the previous one again;
/// when it is current already, one cudaGetDevice. Never throws: when the switch fails, the
/// call it guards fails on its own and says so.
class device_scope {
 public:
  explicit device_scope(int device) noexcept {
    switched_ = cudaGetDevice(&previous_) == cudaSuccess && previous_ != device && cudaSetDevice(device) == cudaSuccess;
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() {
    if (switched_) multipack::detail::note_destructor_result(cudaSetDevice(previous_), "cudaSetDevice");
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace detail

/// A stream on the device current at construction. Non-blocking by default: it does not
/// synchronize with the legacy default stream, so copies on it overlap the trainer's work.
class stream {
 public:
  /// Throws cuda_error. Cost: cudaStreamCreateWithFlags.
  explicit stream(unsigned flags = cudaStreamNonBlocking) : device_(detail::current_device()) {
    MULTIPACK_CUDA_CHECK(cudaStreamCreateWithFlags(&handle_, flags));
  }
  stream(stream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  stream& operator=(stream&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { reset(); }

  [[nodiscard]] cudaStream_t get() const noexcept { return handle_; }
  /// The stream by reference, where a stream_ref is taken (views::to_device(stream)).
  operator stream_ref() const noexcept { return handle_; }  // NOLINT(google-explicit-constructor)
  /// The device the stream belongs to. O(1).
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Blocks the calling thread until everything queued on the stream has run. Throws cuda_error.
  void synchronize() const {
    const detail::device_scope on(device_);
    MULTIPACK_CUDA_CHECK(cudaStreamSynchronize(handle_));
  }

 private:
  void reset() noexcept {
    if (handle_ == nullptr) return;
    const detail::device_scope on(device_);
    multipack::detail::note_destructor_result(cudaStreamDestroy(std::exchange(handle_, nullptr)), "cudaStreamDestroy");
  }
  cudaStream_t handle_ = nullptr;
  int device_ = 0;
};

/// An event. Without timing (the default) it is cheaper to record and to wait for.
class event {
 public:
  /// Throws cuda_error. Cost: cudaEventCreateWithFlags.
  explicit event(bool timing = false) : device_(detail::current_device()) {
    MULTIPACK_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  /// CUDA's flags (cudaEventDisableTiming, say) would convert to the bool above and mean the
  /// opposite: they do not compile. Say event(true) for timing, event() without.
  template <class Flags>
    requires std::integral<Flags> && (!std::same_as<Flags, bool>)
  explicit event(Flags) = delete;
  event(event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  event& operator=(event&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() { reset(); }

  [[nodiscard]] cudaEvent_t get() const noexcept { return handle_; }
  /// Records the event at the current end of `on` (a stream of the event's device). Never
  /// blocks. Throws cuda_error.
  void record(stream_ref on) const {
    const detail::device_scope scope(device_);
    MULTIPACK_CUDA_CHECK(cudaEventRecord(handle_, on.get()));
  }
  /// Blocks until the work before the last record has run. Throws cuda_error.
  void synchronize() const {
    const detail::device_scope on(device_);
    MULTIPACK_CUDA_CHECK(cudaEventSynchronize(handle_));
  }
  /// Milliseconds between two completed, timed events. Throws cuda_error (not ready, no timing).
  [[nodiscard]] static float elapsed_ms(const event& start, const event& end) {
    float ms = 0;
    MULTIPACK_CUDA_CHECK(cudaEventElapsedTime(&ms, start.handle_, end.handle_));
    return ms;
  }

 private:
  void reset() noexcept {
    if (handle_ == nullptr) return;
    const detail::device_scope on(device_);
    multipack::detail::note_destructor_result(cudaEventDestroy(std::exchange(handle_, nullptr)), "cudaEventDestroy");
  }
  cudaEvent_t handle_ = nullptr;
  int device_ = 0;
};

/// Device memory from cudaMalloc, on the device current at construction.
class device_memory {
 public:
  device_memory() = default;
  /// Throws cuda_error (cudaErrorMemoryAllocation when the device is full). Cost: cudaMalloc,
  /// which may synchronize the device: allocate up front, never per batch.
  explicit device_memory(std::size_t bytes) : size_(bytes), device_(detail::current_device()) {
    void* p = nullptr;
    MULTIPACK_CUDA_CHECK(cudaMalloc(&p, bytes));
    data_ = static_cast<std::byte*>(p);
  }
  device_memory(device_memory&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), device_(other.device_) {}
  device_memory& operator=(device_memory&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      device_ = other.device_;
    }
    return *this;
  }
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  ~device_memory() { reset(); }

  /// Device memory: never dereference it on the host.
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The device the memory is on. O(1).
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  void reset() noexcept {
    if (data_ != nullptr) {
      const detail::device_scope on(device_);
      multipack::detail::note_destructor_result(cudaFree(std::exchange(data_, nullptr)), "cudaFree");
    }
    size_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int device_ = 0;
};

/// Page-locked host memory from cudaHostAlloc, as a memory resource: copies from it to the
/// device run at the bus's speed and asynchronously (from pageable memory they are staged
/// and serialized). Allocation page-locks every page (about 1-2 GB/s): allocate once.
/// allocate() throws cuda_error, or std::bad_alloc for an alignment over 256 bytes (what
/// cudaHostAlloc guarantees). Thread-safe. Counts what it has allocated, for statistics.
class pinned_memory_resource : public std::pmr::memory_resource {
 public:
  explicit pinned_memory_resource(unsigned flags = cudaHostAllocDefault) noexcept : flags_(flags) {}

  /// Blocks allocated so far, and bytes currently allocated. O(1), thread-safe.
  [[nodiscard]] std::uint64_t allocations() const noexcept { return allocations_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t bytes_in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t guaranteed_alignment = 256;

  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    if (alignment > guaranteed_alignment) throw std::bad_alloc();
    void* p = nullptr;
    MULTIPACK_CUDA_CHECK(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, flags_));
    allocations_.fetch_add(1, std::memory_order_relaxed);
    in_use_.fetch_add(bytes, std::memory_order_relaxed);
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t) override {
    multipack::detail::note_destructor_result(cudaFreeHost(p), "cudaFreeHost");
    in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  unsigned flags_;
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<std::uint64_t> in_use_{0};
};

}  // namespace multipack::cuda
