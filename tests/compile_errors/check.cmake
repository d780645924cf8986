# One compile-error test: compiles SOURCE with -fsyntax-only and checks the outcome its first
# line names: "// expect: compiles" (the control that proves the command itself works), or
# "// expect: REGEX" (the compiler must fail, and its output must match REGEX: the name of the
# requirement that the misuse breaks). The first error must be the call's own: in SOURCE, or a
# closure's call ("no match for call to", which `x | views::pack(...)` reports in views.hpp),
# not one from inside a template that the misuse got past (which may name the requirement too).
file(STRINGS "${SOURCE}" first LIMIT_COUNT 1)
string(REGEX REPLACE "^// expect: " "" expected "${first}")
# EXTRA_INCLUDE: more include directories, "|" between them (CUDA's for the cases under
# cuda/; concurrentqueue's where it is not on the compiler's own path).
set(extra "")
string(REPLACE "|" ";" extra_includes "${EXTRA_INCLUDE}")
foreach(dir IN LISTS extra_includes)
  if(dir)
    list(APPEND extra "-isystem" "${dir}")
  endif()
endforeach()
execute_process(COMMAND "${COMPILER}" -std=c++20 -fsyntax-only "-I${INCLUDE}" ${extra} "${SOURCE}"
                RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(expected STREQUAL "compiles")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${SOURCE} should compile, but:\n${output}")
  endif()
  message(STATUS "compiles, as expected")
  return()
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled; it must not")
endif()
if(NOT output MATCHES "${expected}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but its errors do not name `${expected}`:\n${output}")
endif()
string(REGEX MATCH "[^\n]*: error: [^\n]*" first_error "${output}")
string(FIND "${first_error}" "${SOURCE}:" at)
if(NOT at EQUAL 0 AND NOT first_error MATCHES "error: no match for call to")
  message(FATAL_ERROR "${SOURCE} failed to compile, but its first error is not at the call:\n${first_error}\n${output}")
endif()
message(STATUS "fails to compile, naming `${expected}`, at the call, as expected")
