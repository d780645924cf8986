#pragma once
// multipack's version, the same as CMakeLists.txt's project(VERSION), ports/multipack/vcpkg.json
// and conanfile.py (a test checks that the four agree).

#define MULTIPACK_VERSION_MAJOR 0
#define MULTIPACK_VERSION_MINOR 1
#define MULTIPACK_VERSION_PATCH 0

namespace multipack {

/// "major.minor.patch".
inline constexpr const char* version = "0.1.0";

}  // namespace multipack
