import os
import textwrap

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, save
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class MultipackConan(ConanFile):
    name = "multipack"
    version = "0.1.0"
    description = "Exact sample packing, sharding and prefetching for LLM training (header-only C++20)"
    license = "Apache-2.0"
    homepage = "https://github.com/multipack/multipack"
    url = "https://github.com/multipack/multipack"
    topics = ("llm", "training", "sequence-packing", "prefetching", "header-only")

    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"cuda": [True, False]}
    default_options = {"cuda": False}

    # Conan's documented header-only recipe: copy the headers and describe them in
    # package_info(), from which CMakeDeps (or any other generator: MSBuildDeps,
    # PkgConfigDeps...) writes the consumer's files, as ConanCenter does. Our own
    # `cmake --install` config is not packaged: Conan would have to be told to skip its
    # generators for it (cmake_find_mode "none"), leaving non-CMake consumers with nothing.
    exports_sources = "include/*", "LICENSE"
    no_copy_source = True

    # Where package() writes the CMake snippet that gives multipack::cuda the CUDA runtime.
    _cuda_module = os.path.join("lib", "cmake", "multipack-conan-cuda.cmake")

    def layout(self):
        basic_layout(self)

    def requirements(self):
        # multipack's public headers include it, so its consumers need its headers too.
        self.requires("concurrentqueue/1.0.4", transitive_headers=True)

    def validate(self):
        if self.settings.get_safe("compiler.cppstd"):
            check_min_cppstd(self, 20)

    def package_id(self):
        # Headers only: one package for every configuration and for both values of `cuda`,
        # which changes package_info() and nothing that is packaged.
        self.info.clear()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"),
             os.path.join(self.package_folder, "include"))
        # Written whatever `cuda` is, so that the package is the same for both values. The
        # CUDA runtime is not a Conan package: like multipack's own CMake config, take it from
        # the CUDA Toolkit on the consumer's machine (FindCUDAToolkit, CMake >= 3.17), and fail
        # clearly where there is none.
        save(self, os.path.join(self.package_folder, self._cuda_module), textwrap.dedent("""\
            # From multipack's Conan recipe; included by find_package(multipack) with cuda=True.
            find_package(CUDAToolkit REQUIRED)
            target_link_libraries(multipack::cuda INTERFACE CUDA::cudart_static)
            """))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "multipack")
        # find_package(multipack 0.1) takes 0.1.x only, as multipack's own CMake package does
        # (CMakeDeps' default is the same major version; recent Conan 2 reads this property).
        self.cpp_info.set_property("cmake_config_version_compat", "SameMinorVersion")
        # CMakeDeps links a package's global target to all of its components; name it apart
        # so that multipack::multipack is the core alone, as in multipack's own CMake package.
        self.cpp_info.set_property("cmake_target_name", "multipack_all_do_not_use")

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "multipack::multipack")
        core.requires = ["concurrentqueue::concurrentqueue"]
        core.bindirs = []
        core.libdirs = []
        if self.settings.os in ("Linux", "FreeBSD"):
            core.system_libs = ["pthread"]

        if self.options.cuda:
            # multipack::cuda: the CUDA room's headers (include/multipack/cuda) need the CUDA
            # Toolkit at the consumer's build, linked by the module above; generators other
            # than CMakeDeps get no CUDA flags and must add the toolkit themselves.
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "multipack::cuda")
            cuda.requires = ["core"]
            cuda.includedirs = []
            cuda.bindirs = []
            cuda.libdirs = []
            self.cpp_info.set_property("cmake_build_modules", [self._cuda_module])
