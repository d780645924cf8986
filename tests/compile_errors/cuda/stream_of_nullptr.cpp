// expect: stream_ref::stream_ref\(std::nullptr_t\)
// nullptr as the stream of views::to_device: the legacy default stream, unsaid. Refused.
#include <multipack/cuda/views.hpp>

auto misuse() { return multipack::views::to_device(nullptr); }
