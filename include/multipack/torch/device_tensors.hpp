#pragma once
// Device batches of the `cuda/` layer as CUDA tensors over their device buffers, no copy.
//
//   multipack::cuda::device_loader<multipack::indexed_dataset, std::int64_t> loader(...);
//   while (auto batch = loader.next()) {
//     auto b = multipack::torch::to_tensors(std::move(*batch), stream);   // the trainer's stream
//     auto logits = model(b.input_ids, b.position_ids, b.sequence_ids);   // queued on `stream`
//   }
//
// The tensors own the batch as the host ones do (torch/tensors.hpp): its device buffer goes
// back when the last tensor dies, released on the trainer's stream, so it is overwritten only
// after the work queued there by then has passed; a batch may outlive its loader. libtorch
// must be built with CUDA (Debian's is not: there, a device batch's tensors throw
// libtorch's "Cannot initialize CUDA" error). On the loader's host fallback the tensors are
// CPU tensors over the host batch.
//
// libtorch queues its kernels on its own current stream, not on `stream`: make `stream`
// libtorch's current stream while the tensors are used (c10::cuda::CUDAStreamGuard over
// c10::cuda::getStreamFromExternal(stream.get(), device)), or both orderings above, the wait
// for the copy and the release after the reads, are on a stream the reads are not. `stream`
// must outlive the tensors: the last of them records the release on it.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "multipack/cuda/device_loader.hpp"
#include "multipack/cuda/error.hpp"
#include "multipack/torch/tensors.hpp"

namespace multipack::torch {

/// Tensors that own `batch`, a device_batch of cuda::device_loader::next() or
/// views::to_device's stager (taken by move), after making `consumer` wait for its copy
/// (device_batch::wait: on the device, the host does not block): tensors on the device that
/// holds the batch, or CPU tensors on the host fallback. When the last of them dies, the batch
/// is released on `consumer`. O(1), one allocation, no copy; but a stager's host-fallback
/// batch owns no buffer (it is the caller's host batch, which stage() lets the caller reuse):
/// its tensors are a copy (copy_tensors), or reusing the host buffers would change them. Throws
/// cuda_error (the wait, the pointer query), option_error for a batch waited on another
/// stream already (device_batch::wait), what torch::from_blob throws (no CUDA in libtorch); the
/// batch is then released.
template <batch_token T>
[[nodiscard]] batch_tensors to_tensors(cuda::device_batch<T>&& batch, cuda::stream_ref consumer) {
  if (batch.borrowed()) {  // a stager's fallback: the caller's host batch, which it may reuse
    batch_tensors t = copy_tensors(batch.view().host(), batch.step(), batch.rank());
    t.epoch = batch.epoch();
    batch.release();  // taken, as on every other path
    return t;
  }
  auto owner = std::make_shared<cuda::device_batch<T>>(std::move(batch));
  owner->wait(consumer);
  ::torch::Device device = ::torch::kCPU;
  if (owner->on_device()) {
    cudaPointerAttributes attributes{};
    MULTIPACK_CUDA_CHECK(cudaPointerGetAttributes(&attributes, owner->view().input_ids.get()));
    device = ::torch::Device(::torch::kCUDA, static_cast<::torch::DeviceIndex>(attributes.device));
  }
  batch_tensors t = detail::tensors_over(owner->view(), owner, device);
  t.step = owner->step();
  t.epoch = owner->epoch();
  t.rank = owner->rank();
  return t;
}

}  // namespace multipack::torch
