# The torch/ layer: multipack::torch when libtorch is found (Debian's libtorch-dev, through
# its TorchConfig.cmake). Without libtorch the target is simply absent, as multipack::cuda is
# without CUDA; find_package(multipack COMPONENTS torch) then fails and says why.
option(MULTIPACK_TORCH "Provide multipack::torch when libtorch is found" ${multipack_components_default})
set(multipack_has_torch OFF)
if(MULTIPACK_TORCH)
  get_directory_property(multipack_imported_before IMPORTED_TARGETS)
  find_package(Torch QUIET)
  if(Torch_FOUND OR TORCH_FOUND)
    set(multipack_has_torch ON)
    # libtorch's imported targets (torch, torch_cpu, c10, ...) are local to this directory,
    # but multipack::torch's link line names them in the project that links it: under
    # add_subdirectory or FetchContent, a parent's directory. Global, they are seen there.
    if(NOT multipack_is_top_level)
      get_directory_property(multipack_torch_imported IMPORTED_TARGETS)
      list(REMOVE_ITEM multipack_torch_imported ${multipack_imported_before})
      foreach(imported IN LISTS multipack_torch_imported)
        set_target_properties(${imported} PROPERTIES IMPORTED_GLOBAL TRUE)
      endforeach()
    endif()
    add_library(multipack_torch INTERFACE)
    add_library(multipack::torch ALIAS multipack_torch)
    set_target_properties(multipack_torch PROPERTIES EXPORT_NAME torch)
    target_link_libraries(multipack_torch INTERFACE multipack::multipack ${TORCH_LIBRARIES})
    # libtorch's ABI flag (-D_GLIBCXX_USE_CXX11_ABI=1 on Debian), which its target may not carry.
    separate_arguments(multipack_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
    target_compile_options(multipack_torch INTERFACE ${multipack_torch_flags})
    message(STATUS "multipack: libtorch ${Torch_VERSION} found: multipack::torch is available")
  else()
    message(STATUS "multipack: no libtorch: multipack::torch is not built (Debian: libtorch-dev)")
  endif()
endif()
