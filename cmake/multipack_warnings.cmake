# Warnings for our own targets (tests, benchmarks, examples); consumers set their own.
add_library(multipack_warnings INTERFACE)
target_compile_options(multipack_warnings INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow>)
option(MULTIPACK_WERROR "Treat warnings as errors" OFF)
if(MULTIPACK_WERROR)
  target_compile_options(multipack_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
