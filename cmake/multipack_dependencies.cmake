# The library's own dependencies: the standard library, range-v3, concurrentqueue, threads.
find_package(Threads REQUIRED)
# range-v3's version file wants an exact match: ask for no version.
find_package(range-v3 CONFIG REQUIRED)
include(multipack_concurrentqueue)
if(NOT TARGET concurrentqueue::concurrentqueue)
  message(FATAL_ERROR "multipack: concurrentqueue not found "
                      "(Debian: apt-get install libconcurrentqueue-dev; vcpkg and Conan: concurrentqueue)")
endif()
