# The library's own dependencies: the standard library, concurrentqueue, threads. (No header
# includes range-v3: the stages take its views, and the tests prove it, but need none of it.)
find_package(Threads REQUIRED)
include(multipack_concurrentqueue)
if(NOT TARGET concurrentqueue::concurrentqueue)
  message(FATAL_ERROR "multipack: concurrentqueue not found "
                      "(Debian: apt-get install libconcurrentqueue-dev; vcpkg and Conan: concurrentqueue)")
endif()
