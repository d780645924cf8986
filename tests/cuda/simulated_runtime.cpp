// A CUDA runtime simulated on the host, so that the device loader's ordering (which buffer
// may be overwritten when, what waits for what) is tested on machines without a GPU, and
// under ThreadSanitizer. It defines the runtime functions the library and its tests call,
// with their semantics:
//  - a stream is a thread running its operations in order; "device memory" is host memory;
//  - an event record is an operation; waiting for an event (cudaStreamWaitEvent,
//    cudaEventSynchronize, cudaEventQuery) refers to its latest record at the time of the call;
//  - a copy takes time in proportion to its bytes (2 GB/s), which widens the window in which
//    a buffer overwritten too early would be caught;
//  - host-to-device copies must come from cudaHostAlloc memory and land inside a cudaMalloc
//    block, or they count as violations (the real runtime would serialize or fault); a copy
//    whose source changes between cudaMemcpyAsync and the copy on its stream is a violation
//    too (the host rewrote a buffer a queued copy had yet to read);
//  - multipack::test::fail_call(call, n) makes the n-th next cudaMemcpyAsync, cudaEventRecord,
//    cudaMalloc or cudaHostAlloc fail.
// MULTIPACK_SIMULATED_DEVICES=0 makes it a machine without a driver (error 35 everywhere);
// N > 1 gives N devices. Each thread has its current device (cudaSetDevice); streams, events
// and device memory belong to the device current when they were made, and recording,
// synchronizing or destroying one with another device current counts as a violation (the
// real runtime refuses a record across devices). A failed call is the thread's last error
// until cudaGetLastError clears it. multipack::test::fail_next_release() makes the next
// cudaStreamDestroy, cudaEventDestroy or cudaFree fail (after freeing), as a lost context would.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "cuda_calls.hpp"

using clock_type = std::chrono::steady_clock;

struct CUstream_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> operations;
  bool running = false;  // an operation is being run
  bool stopping = false;
  std::thread worker;

  CUstream_st() : worker([this] { run(); }) {}

  void enqueue(std::function<void()> operation) {
    {
      const std::lock_guard lock(mutex);
      operations.push_back(std::move(operation));
    }
    changed.notify_all();
  }

  void synchronize() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [this] { return operations.empty() && !running; });
  }

  bool idle() {
    const std::lock_guard lock(mutex);
    return operations.empty() && !running;
  }

  void stop() {
    synchronize();
    {
      const std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    worker.join();
  }

 private:
  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [this] { return stopping || !operations.empty(); });
      if (operations.empty()) return;  // stopping, with nothing left
      auto operation = std::move(operations.front());
      operations.pop_front();
      running = true;
      lock.unlock();
      operation();
      lock.lock();
      running = false;
      changed.notify_all();
    }
  }
};

struct CUevent_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0;   // records made
  std::uint64_t completed = 0;  // the latest record that has run
  clock_type::time_point at;    // when it ran
  bool timing = true;

  std::uint64_t latest() {
    const std::lock_guard lock(mutex);
    return recorded;
  }
  void complete(std::uint64_t record) {
    // Notified under the lock: a waiter may destroy the event as soon as it sees the record.
    const std::lock_guard lock(mutex);
    completed = std::max(completed, record);
    at = clock_type::now();
    changed.notify_all();
  }
  void wait_for(std::uint64_t record) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return completed >= record; });
  }
};

namespace {

struct state {
  std::mutex mutex;
  std::map<const std::byte*, std::size_t> pinned;  // start -> bytes
  std::map<const std::byte*, std::size_t> device;
  std::map<const std::byte*, int> device_of;  // device memory -> its device
  std::atomic<bool> fail_next_release{false};
  std::atomic<int> fail_in[4] = {0, 0, 0, 0};  // by multipack::test::cuda_call: calls until one fails
  std::atomic<std::int64_t> host_allocations{0}, host_frees{0}, device_allocations{0}, device_frees{0},
      synchronous_copies{0}, async_copies{0}, violations{0};
  int devices = [] {
    const char* value = std::getenv("MULTIPACK_SIMULATED_DEVICES");
    return value == nullptr ? 1 : std::atoi(value);
  }();
};

state& simulated() {
  static state s;
  return s;
}

bool no_driver() { return simulated().devices <= 0; }

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

/// Returns `error`, which becomes the thread's last error unless it is cudaSuccess.
cudaError_t fail(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

/// A stream, event or block of `device` used with the current device: a violation if they differ.
void check_device(int device) {
  if (device != current_device) ++simulated().violations;
}

/// Whether this call of `call` is the one fail_call asked to fail (counting it down).
bool injected_failure(multipack::test::cuda_call call) {
  std::atomic<int>& left = simulated().fail_in[static_cast<int>(call)];
  int n = left.load();
  while (n > 0 && !left.compare_exchange_weak(n, n - 1)) {
  }
  return n == 1;
}

/// cudaSuccess, or the injected failure of a release (see fail_next_release).
cudaError_t release_result() {
  return fail(simulated().fail_next_release.exchange(false) ? cudaErrorInvalidResourceHandle : cudaSuccess);
}

/// Whether [p, p + bytes) lies inside one block of `blocks`.
bool inside(const std::map<const std::byte*, std::size_t>& blocks, const void* p, std::size_t bytes) {
  const auto* b = static_cast<const std::byte*>(p);
  auto it = blocks.upper_bound(b);
  if (it == blocks.begin()) return false;
  --it;
  return b + bytes <= it->first + it->second;
}

void transfer_time(std::size_t bytes) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(bytes / 2));  // 2 GB/s
}

}  // namespace

namespace multipack::test {
cuda_call_counts cuda_calls() {
  state& s = simulated();
  return {s.host_allocations.load(), s.host_frees.load(), s.device_allocations.load(),
          s.device_frees.load(),     s.synchronous_copies.load(), s.async_copies.load()};
}
std::int64_t cuda_violations() { return simulated().violations.load(); }
void fail_next_release() { simulated().fail_next_release.store(true); }
void fail_call(cuda_call call, int n) { simulated().fail_in[static_cast<int>(call)].store(n); }
}  // namespace multipack::test

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  *count = simulated().devices;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "simulated error";
  }
}

cudaError_t cudaGetLastError(void) {
  if (no_driver()) return cudaErrorInsufficientDriver;  // sticky: it never clears
  return std::exchange(last_error, cudaSuccess);
}
cudaError_t cudaPeekAtLastError(void) { return no_driver() ? cudaErrorInsufficientDriver : last_error; }
cudaError_t cudaGetDevice(int* device) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  if (device < 0 || device >= simulated().devices) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  if (injected_failure(multipack::test::cuda_call::host_alloc)) return fail(cudaErrorMemoryAllocation);
  *p = ::operator new(size, std::align_val_t{256});
  state& s = simulated();
  ++s.host_allocations;
  const std::lock_guard lock(s.mutex);
  s.pinned[static_cast<const std::byte*>(*p)] = size;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t size) { return cudaHostAlloc(p, size, 0); }
cudaError_t cudaFreeHost(void* p) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  state& s = simulated();
  {
    const std::lock_guard lock(s.mutex);
    if (s.pinned.erase(static_cast<const std::byte*>(p)) == 0) return cudaErrorInvalidValue;
  }
  ++s.host_frees;
  ::operator delete(p, std::align_val_t{256});
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t size) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  if (size >= (std::size_t{1} << 40)) return fail(cudaErrorMemoryAllocation);  // a terabyte: the device is full
  if (injected_failure(multipack::test::cuda_call::malloc)) return fail(cudaErrorMemoryAllocation);
  *p = ::operator new(size, std::align_val_t{256});
  std::memset(*p, 0xA5, size);  // device memory is not zeroed: make stale reads visible
  state& s = simulated();
  ++s.device_allocations;
  const std::lock_guard lock(s.mutex);
  s.device[static_cast<const std::byte*>(*p)] = size;
  s.device_of[static_cast<const std::byte*>(*p)] = current_device;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  if (p == nullptr) return cudaSuccess;
  state& s = simulated();
  {
    const std::lock_guard lock(s.mutex);
    if (s.device.erase(static_cast<const std::byte*>(p)) == 0) return fail(cudaErrorInvalidValue);
    check_device(s.device_of[static_cast<const std::byte*>(p)]);
    s.device_of.erase(static_cast<const std::byte*>(p));
  }
  ++s.device_frees;
  ::operator delete(p, std::align_val_t{256});
  return release_result();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  *stream = new CUstream_st;
  (*stream)->device = current_device;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  check_device(stream->device);
  stream->stop();
  delete stream;
  return release_result();
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream == nullptr) return cudaSuccess;  // the default stream runs everything at once here
  check_device(stream->device);
  stream->synchronize();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (stream == nullptr) return cudaSuccess;
  return stream->idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  *event = new CUevent_st;
  (*event)->timing = (flags & cudaEventDisableTiming) == 0;
  (*event)->device = current_device;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  check_device(event->device);
  delete event;
  return release_result();
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (injected_failure(multipack::test::cuda_call::event_record)) return fail(cudaErrorInvalidResourceHandle);
  check_device(event->device);
  if (stream != nullptr && stream->device != event->device) ++simulated().violations;
  std::uint64_t record = 0;
  {
    const std::lock_guard lock(event->mutex);
    record = ++event->recorded;
  }
  if (stream == nullptr) {
    event->complete(record);
  } else {
    stream->enqueue([event, record] { event->complete(record); });
  }
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  const std::lock_guard lock(event->mutex);
  return event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  event->wait_for(event->latest());
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->timing || !end->timing) return cudaErrorInvalidResourceHandle;
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess) return cudaErrorNotReady;
  clock_type::time_point a, b;
  {
    const std::lock_guard lock(start->mutex);
    a = start->at;
  }
  {
    const std::lock_guard lock(end->mutex);
    b = end->at;
  }
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  const std::uint64_t record = event->latest();
  if (stream == nullptr) {
    event->wait_for(record);
  } else {
    stream->enqueue([event, record] { event->wait_for(record); });
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* to, const void* from, size_t bytes, enum cudaMemcpyKind) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  ++simulated().synchronous_copies;
  std::memcpy(to, from, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* to, const void* from, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  if (injected_failure(multipack::test::cuda_call::memcpy_async)) return fail(cudaErrorInvalidValue);
  state& s = simulated();
  {
    const std::lock_guard lock(s.mutex);
    if (kind == cudaMemcpyHostToDevice) {
      ++(inside(s.pinned, from, bytes) ? s.async_copies : s.synchronous_copies);  // pageable: staged, serialized
      if (!inside(s.device, to, bytes)) ++s.violations;
    } else if (kind == cudaMemcpyDeviceToHost) {
      if (!inside(s.device, from, bytes)) ++s.violations;
    }
  }
  // The source as queued: a queued host-to-device copy whose source changes before it runs
  // read a buffer the host was rewriting.
  auto queued = std::make_shared<std::string>();
  if (kind == cudaMemcpyHostToDevice && stream != nullptr) queued->assign(static_cast<const char*>(from), bytes);
  auto copy = [to, from, bytes, queued] {
    transfer_time(bytes);
    if (!queued->empty() && std::memcmp(queued->data(), from, bytes) != 0) ++simulated().violations;
    std::memcpy(to, from, bytes);
  };
  if (stream == nullptr) {
    copy();
  } else {
    stream->enqueue(copy);
  }
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (no_driver()) return cudaErrorInsufficientDriver;
  if (stream == nullptr) {
    fn(data);
  } else {
    stream->enqueue([fn, data] { fn(data); });
  }
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* p) {
  state& s = simulated();
  const std::lock_guard lock(s.mutex);
  *attributes = {};
  attributes->type = inside(s.pinned, p, 1)   ? cudaMemoryTypeHost
                     : inside(s.device, p, 1) ? cudaMemoryTypeDevice
                                              : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}

}  // extern "C"
