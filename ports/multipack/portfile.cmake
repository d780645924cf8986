# multipack is header-only: one (release) configuration is all there is to install.
set(VCPKG_BUILD_TYPE release)

# multipack is not published yet, so this overlay port builds the checkout it lives in
# (ports/multipack/../..). vcpkg's ABI hash covers the port's files, not that tree: to pick up
# changed headers, `vcpkg remove multipack`, then install again with --editable (no binary cache).
# Once a release is tagged, replace the next line with:
#   vcpkg_from_github(
#       OUT_SOURCE_PATH SOURCE_PATH
#       REPO multipack/multipack
#       REF "v${VERSION}"
#       SHA512 0  # the first install fails and prints the archive's SHA512: paste it here
#       HEAD_REF main
#   )
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

# multipack[cuda] -> -DMULTIPACK_CUDA=ON, otherwise OFF. Nothing is compiled either way: the
# feature's dependency on the "cuda" port makes vcpkg check that a CUDA Toolkit is installed.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
    FEATURES
        cuda MULTIPACK_CUDA
)

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        ${FEATURE_OPTIONS}
        -DMULTIPACK_INSTALL=ON
        -DMULTIPACK_BUILD_TESTS=OFF
        -DMULTIPACK_BUILD_BENCHMARKS=OFF
        -DMULTIPACK_BUILD_EXAMPLES=OFF
        -DMULTIPACK_BUILD_PYTHON=OFF
)
vcpkg_cmake_install()

# The project installs its CMake package in share/cmake/multipack; vcpkg wants share/multipack.
# The fixup moves it, deletes the emptied share/cmake and corrects the relative install prefix.
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/multipack)
# vcpkg takes a .pc file in share/pkgconfig only without Libs (ours has -pthread): it goes to
# lib/pkgconfig (the same depth, so its relative prefix holds), which the fixup then corrects.
file(MAKE_DIRECTORY "${CURRENT_PACKAGES_DIR}/lib/pkgconfig")
file(RENAME "${CURRENT_PACKAGES_DIR}/share/pkgconfig/multipack.pc" "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/multipack.pc")
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/pkgconfig")
vcpkg_fixup_pkgconfig()

# The licence goes to share/multipack/copyright, not to the project's share/doc copy.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/doc")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
