#!/usr/bin/env bash
# pip install --no-build-isolation of this checkout into a fresh venv (system
# site packages, Debian's setuptools, no index: offline), then, from another
# directory and without FA_RUNTIME_LIB: import fa, check that the
# libfa_runtime it loads is the one installed inside the package, and load a
# bundle and list its kernels (the C ABI needs no GPU for that).
# With an fa-aot given, it is shipped in the package (FA_PACKAGE_COMPILER) and
# must be the compiler fa.jit finds there, ahead of PATH.
#   test_pip.sh <bundle dir> [<fa-aot>]   (PYTHON: the interpreter, default /usr/bin/python3)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUNDLE=$(cd "$1" && pwd)
PY=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
unset FA_RUNTIME_LIB PYTHONPATH FA_AOT
export FA_PACKAGE_COMPILER=${2:+$(cd "$(dirname "$2")" && pwd)/$(basename "$2")}
"$PY" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/pip" install --no-build-isolation --no-index --no-deps -q "$SRC" \
  > "$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log"; echo "FAILED: pip install"; exit 1; }
cd "$WORK"
"$WORK/venv/bin/python" - "$BUNDLE" "$FA_PACKAGE_COMPILER" <<'PY'
import os, sys
import fa
from fa import _runtime
pkg = os.path.dirname(fa.__file__)
assert pkg.startswith(sys.prefix), "fa imported from %s, not the venv %s" % (pkg, sys.prefix)
lib = _runtime.open_library()
assert lib._name == os.path.join(pkg, "libfa_runtime.so"), lib._name
bundle = fa.Bundle(sys.argv[1])
kernels = bundle.kernels()
assert kernels and all(k["tag"] for k in kernels), kernels
print("ok: fa from %s, %s, %d kernels in %s" % (pkg, lib._name, len(kernels), sys.argv[1]))
if sys.argv[2]:
    from fa import jit
    shipped = os.path.join(pkg, "bin", "fa-aot")
    assert jit.find_compiler() == shipped, jit.find_compiler()
    print("ok: fa.jit compiles with the packaged %s (%s)" % (shipped,
                                                          jit.compiler_version(shipped)))
PY
echo "RESULT: pip package passed"
