# The library's own dependencies: the standard library, range-v3, concurrentqueue, threads.
find_package(Threads REQUIRED)
# range-v3's version file wants an exact match: ask for no version.
find_package(range-v3 CONFIG REQUIRED)

# Upstream, vcpkg and Conan ship a config with concurrentqueue::concurrentqueue;
# Debian ships only the headers, under <concurrentqueue/...>.
find_package(concurrentqueue CONFIG QUIET)
if(NOT TARGET concurrentqueue::concurrentqueue)
  find_path(multipack_concurrentqueue_dir NAMES concurrentqueue/concurrentqueue.h
                                                moodycamel/concurrentqueue.h
            DOC "directory holding concurrentqueue/ or moodycamel/")
  if(NOT multipack_concurrentqueue_dir)
    message(FATAL_ERROR "multipack: concurrentqueue not found "
                        "(Debian: apt-get install libconcurrentqueue-dev)")
  endif()
  add_library(concurrentqueue::concurrentqueue INTERFACE IMPORTED)
  set_target_properties(concurrentqueue::concurrentqueue PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${multipack_concurrentqueue_dir}")
endif()
