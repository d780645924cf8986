# The CUDA room: multipack::cuda when the CUDA Toolkit is found. It needs only the runtime
# API, so it is compiled by the host compiler and linked to CUDA's static runtime (what nvcc
# links by default). Without the toolkit the target is simply absent.
option(MULTIPACK_CUDA "Provide multipack::cuda when the CUDA Toolkit is found" ${multipack_components_default})
set(multipack_has_cuda OFF)
if(MULTIPACK_CUDA)
  # Debian and NVIDIA's installers leave the toolkit in /usr/local/cuda, off the PATH.
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS "/usr/local/cuda/bin/nvcc")
    set(CUDAToolkit_ROOT "/usr/local/cuda")
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(multipack_has_cuda ON)
    add_library(multipack_cuda INTERFACE)
    add_library(multipack::cuda ALIAS multipack_cuda)
    set_target_properties(multipack_cuda PROPERTIES EXPORT_NAME cuda)
    target_link_libraries(multipack_cuda INTERFACE multipack::multipack CUDA::cudart_static)
    message(STATUS "multipack: CUDA ${CUDAToolkit_VERSION} found: multipack::cuda is available")
  else()
    message(STATUS "multipack: no CUDA Toolkit: multipack::cuda is not built")
  endif()
endif()

# nvcc for our own .cu files (a translation unit that includes the CUDA room, the
# benchmark's busy-wait kernel): only in the top-level, uninstrumented build, since nvcc
# takes neither the sanitizers' nor our warnings' flags.
set(multipack_has_nvcc OFF)
if(multipack_has_cuda AND multipack_is_top_level AND NOT MULTIPACK_SANITIZE
   AND (MULTIPACK_BUILD_TESTS OR MULTIPACK_BUILD_BENCHMARKS))
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # H100 / H200; override on the command line
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(multipack_has_nvcc ON)
  endif()
endif()
