"""Builds libfa_runtime (lib/Runtime, standalone CMake project) while
building the package and puts it inside it, as fa/libfa_runtime.so, where
fa._runtime.open_library looks first. The metadata is in pyproject.toml.

Environment: CMAKE_GENERATOR, CMAKE_CXX_COMPILER_LAUNCHER (e.g. ccache) as
for any CMake build; FA_JSON_INCLUDE_DIR, a directory holding nlohmann/ when
the system has none; FA_PACKAGE_COMPILER, an fa-aot to ship as fa/bin/fa-aot,
where fa.jit finds it (it still needs the MLIR/LLVM it was linked with)."""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithRuntime(build_py):
    """build_py, then libfa_runtime.so built by CMake into the package."""

    def run(self):
        super().run()
        build_temp = os.path.abspath(self.get_finalized_command("build").build_temp)
        work = os.path.join(build_temp, "fa-runtime")
        configure = ["cmake", "-S", os.path.join(ROOT, "lib", "Runtime"), "-B", work,
                     "-DCMAKE_BUILD_TYPE=Release"]
        if not os.environ.get("CMAKE_GENERATOR") and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if os.environ.get("FA_JSON_INCLUDE_DIR"):
            configure.append("-DFA_JSON_INCLUDE_DIR=" + os.environ["FA_JSON_INCLUDE_DIR"])
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", work, "--target", "fa_runtime", "--parallel",
                        str(os.cpu_count() or 1)], check=True)
        target = os.path.join(self.build_lib, "fa")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(os.path.join(work, "lib", "libfa_runtime.so"), target)
        compiler = os.environ.get("FA_PACKAGE_COMPILER")
        if compiler:
            os.makedirs(os.path.join(target, "bin"), exist_ok=True)
            shutil.copy2(compiler, os.path.join(target, "bin", "fa-aot"))


class BinaryDistribution(Distribution):
    """The wheel holds a shared library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithRuntime}, distclass=BinaryDistribution,
      # Apart from CMake's build/ of the checkout.
      options={"build": {"build_base": os.path.join("build", "python-package")}})
