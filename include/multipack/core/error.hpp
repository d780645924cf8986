#pragma once
// The exceptions multipack throws. Every message names what was wrong and where
// (file, byte offset, sample index or option), so that a user can act on it alone.

#include <stdexcept>
#include <string>

namespace multipack {

/// Base of every exception multipack throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A file could not be opened, mapped or read (the operating system said no).
class io_error : public error {
 public:
  using error::error;
};

/// A file's content is corrupt, truncated or not of the expected format.
/// The message names the file, the byte offset and what was expected there.
class format_error : public error {
 public:
  using error::error;
};

/// An option or argument is outside what the function accepts (capacity 0, rank >= world...).
class option_error : public error {
 public:
  using error::error;
};

/// A sample cannot be handled under the policy the caller chose
/// (for example longer than a row with `overlong_policy::error`).
class sample_error : public error {
 public:
  using error::error;
};

}  // namespace multipack
