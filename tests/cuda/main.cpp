// The CUDA tests' main: asked for the "device" suite where there is no device, it says why
// and exits with 77, which ctest reports as skipped (SKIP_RETURN_CODE), not passed.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

#include "multipack/cuda/error.hpp"

int main(int argc, char** argv) {
  bool device_suite = false;
  for (int i = 1; i < argc; ++i) device_suite = device_suite || std::string_view(argv[i]) == "--test-suite=device";
  if (device_suite && !multipack::cuda::device_available()) {
    std::printf("skipped: no CUDA device (%s)\n", multipack::cuda::no_device_reason().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
