#pragma once
// multipack-bench convert: JSON Lines of pre-tokenized samples into the indexed format and
// its loss-mask companion, streaming: memory holds one line and the writers' buffers,
// whatever the input's size.
//
// Each line is one JSON object, one sample (and one document):
//   {"input_ids": [1, 2, 3, ...]}                           tokens only
//   {"input_ids": [...], "prompt_length": 12}               the first 12 tokens carry no loss
//   {"input_ids": [...], "labels": [-100, -100, 5, ...]}    a label equal to --ignore-index
//                                                            carries no loss (any pattern)
// Blank lines are skipped. The first sample decides whether prompt lengths or labels come
// with every sample; a later line without them (or with the other kind) is an error.
//
// Writes OUT.bin + OUT.idx (Megatron's format, --dtype tokens), and with prompt lengths
// OUT.prompt_lengths (the binary MPPROMPT form), with labels OUT.loss_mask.bin/.idx (a uint8
// token mask: 1 carries loss). Every file is written under a temporary name and renamed at
// the end, once all are complete: an error leaves no output behind (and earlier outputs of the
// same name as they were). A companion of the other kind (or of either, without a mask) that
// an earlier conversion left at OUT is removed, and the report names it.

#include <cstdint>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace multipack::bench {

struct convert_command_options {
  std::string input;
  std::string output;
  std::string dtype = "int32";
  std::string tokens_field = "input_ids";
  std::string prompt_field = "prompt_length";
  std::string labels_field = "labels";
  std::int64_t ignore_index = -100;
  bool json = false;
  /// The mask form the user named (--prompt-field or --labels-field given): every line must
  /// have its field. Without either, the first line's fields decide (and later lines follow).
  bool prompt_field_required = false;
  bool labels_field_required = false;
};

/// Adds `convert`; when it is the subcommand given, sets `action` to run it.
void add_convert_command(CLI::App& app, convert_command_options& o, std::function<int()>& action);

}  // namespace multipack::bench
