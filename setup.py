"""Builds libfa_runtime (lib/Runtime, standalone CMake project) while
building the package and puts it inside it, as fa/libfa_runtime.so, where
fa._runtime.open_library looks first. The metadata is in pyproject.toml.

Environment: CMAKE_GENERATOR, CMAKE_CXX_COMPILER_LAUNCHER (e.g. ccache) as
for any CMake build; FA_JSON_INCLUDE_DIR, a directory holding nlohmann/ when
the system has none; FA_PACKAGE_COMPILER, an fa-aot to ship as fa/bin/fa-aot,
where fa.jit finds it (it still needs the MLIR/LLVM it was linked with);
FA_BUILD_TORCH_EXT=0 skips fa's C++ autograd extension, built otherwise where
the install sees PyTorch and a CUDA toolkit."""
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
        self._build_torch_extension(target)
        compiler = os.environ.get("FA_PACKAGE_COMPILER")
        if compiler:
            os.makedirs(os.path.join(target, "bin"), exist_ok=True)
            shutil.copy2(compiler, os.path.join(target, "bin", "fa-aot"))


    def _build_torch_extension(self, target):
        """fa's C++ autograd function (fa/_torch_ext.py) against the PyTorch
        this install sees (--no-build-isolation), where there is one with a
        CUDA toolkit; FA_BUILD_TORCH_EXT=0 skips it. Without it fa runs the
        same kernels through a Python autograd.Function."""
        if os.environ.get("FA_BUILD_TORCH_EXT", "1") == "0":
            return
        try:
            import torch  # noqa: F401
            from torch.utils import cpp_extension
        except ImportError:
            return
        source = os.path.join(ROOT, "python", "fa", "csrc", "torch_autograd.cpp")
        build_dir = os.path.join(os.path.abspath(self.get_finalized_command("build").build_temp),
                                 "fa-torch-ext")
        os.makedirs(build_dir, exist_ok=True)
        try:
            cpp_extension.load(name="fa_torch_autograd", sources=[source],
                               extra_cflags=["-O2"], with_cuda=True, build_directory=build_dir)
        except Exception as e:  # noqa: BLE001 (no compiler or CUDA headers)
            print("fa: not building the C++ autograd extension: %s" % str(e).splitlines()[0])
            return
        shutil.copy2(os.path.join(build_dir, "fa_torch_autograd.so"), target)


class BinaryDistribution(Distribution):
    """The wheel holds a shared library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithRuntime}, distclass=BinaryDistribution,
      # Apart from CMake's build/ of the checkout.
      options={"build": {"build_base": os.path.join("build", "python-package")}})
