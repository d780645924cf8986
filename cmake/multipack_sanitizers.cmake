# MULTIPACK_SANITIZE=address,undefined or =thread: instruments everything this project builds.
set(MULTIPACK_SANITIZE "" CACHE STRING "Sanitizers to build with (address,undefined | thread)")
if(MULTIPACK_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${MULTIPACK_SANITIZE};-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
  add_link_options("$<$<LINK_LANGUAGE:CXX>:-fsanitize=${MULTIPACK_SANITIZE}>")
endif()
if(MULTIPACK_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # moodycamel's queue uses std::atomic_thread_fence, which ThreadSanitizer does not model;
  # GCC warns at every use. The queue's own tests run under ThreadSanitizer upstream; ours
  # check the prefetcher's behaviour through it.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-tsan>)
endif()
