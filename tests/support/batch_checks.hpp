#pragma once
// What the loader tests compare batches with: a batch flattened (counts and used arrays),
// the batch of (step, rank) collated directly on the calling thread, and a dataset whose
// reads of one sample fail as a disk error would.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "multipack/batch/collate.hpp"
#include "multipack/batch/layout.hpp"
#include "multipack/core/error.hpp"
#include "multipack/data/indexed_dataset.hpp"
#include "multipack/pipeline/batch_loader.hpp"
#include "multipack/schedule/plan.hpp"

namespace multipack::test {

/// Everything a batch holds, flattened: its counts, then the used part of every array.
template <class T>
std::vector<std::int64_t> contents(const batch_view<T>& b) {
  std::vector<std::int64_t> all{b.rows, b.row_length, b.segments, b.max_seqlen, b.padding_rows,
                                static_cast<std::int64_t>(b.real_tokens), static_cast<std::int64_t>(b.loss_tokens)};
  for (const auto span : {b.used_input_ids(), b.used_labels(), b.used_position_ids(), b.used_sequence_ids()})
    all.insert(all.end(), span.begin(), span.end());
  const auto cu = b.used_cu_seqlens();
  all.insert(all.end(), cu.begin(), cu.end());
  return all;
}

/// These rows collated directly into buffers of `layout`, on this thread: the reference.
template <class T, class Dataset>
std::vector<std::int64_t> collated(const Dataset& dataset, const batch_layout& layout,
                                   std::span<const std::span<const piece>> rows, const batch_options& options) {
  batch_buffers<T> storage(layout);
  batch_view<T> view = storage.view();
  collate(dataset, rows, options.mask, options.collate, view);
  return contents(view);
}

/// The batch of (step, rank) collated directly, on this thread: the reference.
template <class T, class Dataset>
std::vector<std::int64_t> reference(const Dataset& dataset, const epoch_plan& plan, std::uint64_t step,
                                    std::uint32_t rank, const batch_options& options) {
  std::vector<std::span<const piece>> rows;
  for (std::uint32_t slot = 0; slot < plan.schedule.micro_batch(); ++slot) rows.push_back(plan.pieces(step, rank, slot));
  return collated<T>(dataset, layout_of(plan, options.pad_to_multiple), rows, options);
}

/// A dataset whose reads of one sample fail, as a disk error would.
struct failing_dataset {
  std::shared_ptr<const indexed_dataset> inner;
  std::size_t failing;
  [[nodiscard]] std::size_t size() const { return inner->size(); }
  [[nodiscard]] std::uint64_t length(std::size_t i) const { return inner->length(i); }
  template <class Out>
  void read_tokens(std::size_t i, std::uint64_t first, std::span<Out> out) const {
    if (i == failing) throw io_error("read of sample " + std::to_string(i) + " failed");
    inner->read_tokens(i, first, out);
  }
};

}  // namespace multipack::test
