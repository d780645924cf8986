#pragma once
// libtorch's headers bring glog, whose CHECK macros take doctest's names (a CHECK would abort
// the process instead of reporting). Included first by the torch/ tests: libtorch, then
// glog's macros dropped, then doctest's.

#include <torch/torch.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE

#include <doctest/doctest.h>
