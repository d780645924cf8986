# moodycamel's concurrentqueue as the target concurrentqueue::concurrentqueue, wherever it is
# installed: upstream and Conan ship a CMake config that makes that target; Debian ships only
# the headers (under <concurrentqueue/...>), and vcpkg the headers there with a config of
# another name (unofficial-concurrentqueue), for which this makes it. Used by the
# build and by the installed package config alike.
if(NOT TARGET concurrentqueue::concurrentqueue)
  find_package(concurrentqueue CONFIG QUIET)
endif()
if(NOT TARGET concurrentqueue::concurrentqueue)
  find_path(multipack_concurrentqueue_dir NAMES concurrentqueue/concurrentqueue.h
                                                moodycamel/concurrentqueue.h
            DOC "directory holding concurrentqueue/ or moodycamel/")
  if(multipack_concurrentqueue_dir)
    add_library(concurrentqueue::concurrentqueue INTERFACE IMPORTED)
    set_target_properties(concurrentqueue::concurrentqueue PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${multipack_concurrentqueue_dir}")
  endif()
endif()
