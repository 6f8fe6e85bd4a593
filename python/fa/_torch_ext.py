"""fa's attention as a C++ autograd function (csrc/torch_autograd.cpp),
built with torch.utils.cpp_extension.

A Python torch.autograd.Function costs more host time per forward +
backward than PyTorch's whole SDPA call; the extension takes the common
call (no score_mod, q/k/v strides the kernels take) off that path.
`pip install --no-build-isolation .` builds it into the package where it
sees PyTorch and a CUDA toolkit. Otherwise FA_TORCH_EXT
chooses: "1" builds it on first use (a C++ compiler, PyTorch's headers and
CUDA's; about a minute, then cached by PyTorch under
~/.cache/torch_extensions), "0" never uses it, unset uses it when a build
is cached already (`python3 -m fa._torch_ext` builds it). Without it fa
runs the same kernels through a Python autograd.Function.
"""
import ctypes
import os
import sys

_NAME = "fa_torch_autograd"
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc",
                       "torch_autograd.cpp")
_module = None
_tried = False


def _built():
    """Whether PyTorch's extension cache holds a build of the extension."""
    from torch.utils import cpp_extension
    directory = cpp_extension._get_build_directory(_NAME, verbose=False)
    return any(f.endswith(".so") for f in os.listdir(directory)) if os.path.isdir(
        directory) else False


def build(verbose=False):
    """Builds (or loads the cached build of) the extension; its module."""
    global _module, _tried
    from torch.utils import cpp_extension
    _module = cpp_extension.load(name=_NAME, sources=[_SOURCE], extra_cflags=["-O2"],
                                 with_cuda=True, verbose=verbose)
    _tried = True
    return _module


def _packaged():
    """The build `pip install` put into the package (setup.py), or None."""
    global _module
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _NAME + ".so")
    if not os.path.exists(path):
        return None
    import importlib.util
    import torch  # noqa: F401 (the extension links against torch's libraries)
    spec = importlib.util.spec_from_file_location(_NAME, path)
    _module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_module)
    return _module


def module():
    """The extension's module, or None where FA_TORCH_EXT rules it out or it
    cannot be built (then fa keeps its Python autograd.Function)."""
    global _tried
    if _tried:
        return _module
    _tried = True
    choice = os.environ.get("FA_TORCH_EXT", "")
    if choice == "0":
        return None
    try:
        if choice != "1" and _packaged():
            return _module
        if choice == "1" or _built():
            return build()
    except Exception as e:  # noqa: BLE001 (no compiler, headers, CUDA)
        print("fa: the C++ autograd extension is not available (%s); using the Python "
              "path" % str(e).splitlines()[0][:200], file=sys.stderr)
    return None


def function_address(fn):
    """The address of a ctypes function of libfa_runtime."""
    return ctypes.cast(fn, ctypes.c_void_p).value


if __name__ == "__main__":
    build(verbose=True)
    print("built", _module.__file__)
