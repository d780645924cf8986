# cmake -DSOURCE_DIR=<root> -P check_versions.cmake: fails unless CMakeLists.txt's
# project(VERSION), include/multipack/version.hpp, ports/multipack/vcpkg.json and
# conanfile.py give the same version.
function(read_version file regex out)
  file(READ "${SOURCE_DIR}/${file}" text)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${file}: no version found (expected a match of ${regex})")
  endif()
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

read_version(CMakeLists.txt "project\\(multipack VERSION ([0-9]+\\.[0-9]+\\.[0-9]+)" cmake)
read_version(ports/multipack/vcpkg.json "\"version\": *\"([0-9]+\\.[0-9]+\\.[0-9]+)\"" vcpkg)
read_version(conanfile.py "\n *version *= *\"([0-9]+\\.[0-9]+\\.[0-9]+)\"" conan)
read_version(include/multipack/version.hpp "version = \"([0-9]+\\.[0-9]+\\.[0-9]+)\"" header)
file(READ "${SOURCE_DIR}/include/multipack/version.hpp" text)
string(REGEX MATCH "MAJOR ([0-9]+)" _ "${text}")
set(major ${CMAKE_MATCH_1})
string(REGEX MATCH "MINOR ([0-9]+)" _ "${text}")
set(minor ${CMAKE_MATCH_1})
string(REGEX MATCH "PATCH ([0-9]+)" _ "${text}")
set(macros "${major}.${minor}.${CMAKE_MATCH_1}")

foreach(other IN ITEMS vcpkg conan header macros)
  if(NOT "${${other}}" STREQUAL "${cmake}")
    message(FATAL_ERROR "version mismatch: CMakeLists.txt says ${cmake}, ${other} says ${${other}}")
  endif()
endforeach()
message(STATUS "one version everywhere: ${cmake}")
