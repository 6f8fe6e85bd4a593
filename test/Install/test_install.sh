#!/usr/bin/env bash
# cmake --install of the build into a fresh prefix, then examples/ built
# against it with find_package(fa) only: fa-example-forward on fa::runtime and
# fa-example-compile on fa::compiler, which compiles a config into a bundle
# that the installed fa-aot --version and libfa_runtime's ABI agree with.
#   test_install.sh <build dir>
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log"
for f in lib/libfa_runtime.so lib/libFACompiler.a bin/fa-aot bin/fa-opt bin/fa-run \
         include/fa/Runtime/fa_runtime.h include/fa/Compiler/GpuCompiler.h \
         lib/cmake/fa/faConfig.cmake lib/cmake/fa/faConfigVersion.cmake \
         lib/cmake/fa/faRuntimeTargets.cmake lib/cmake/fa/faCompilerTargets.cmake; do
  [ -e "$WORK/prefix/$f" ] || { echo "FAILED: cmake --install did not install $f"; exit 1; }
done
"$WORK/prefix/bin/fa-aot" --version | grep -q "^fa-aot fa " ||
  { echo "FAILED: the installed fa-aot does not run"; exit 1; }
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake "${gen[@]}" -S "$SRC/examples" -B "$WORK/examples" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
  >"$WORK/configure.log" || { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/examples" >"$WORK/build.log" || { cat "$WORK/build.log"; exit 1; }
[ -x "$WORK/examples/fa-example-forward" ] && [ -x "$WORK/examples/fa-example-compile" ] ||
  { echo "FAILED: an example was not built"; exit 1; }
"$WORK/examples/fa-example-compile" fwd:bf16:d64:causal "$WORK/bundle"
grep -q '"fwd_bf16_d64_bq64_bkv64_w4_s2_causal_sm90a"' "$WORK/bundle/manifest.json" ||
  { echo "FAILED: the bundle of fa-example-compile lacks its kernel"; exit 1; }
# An installed runtime-only package (a deployment machine) still configures.
mkdir -p "$WORK/runtime-only"
cp -r "$WORK/prefix/lib" "$WORK/prefix/include" "$WORK/runtime-only/"
rm "$WORK/runtime-only/lib/cmake/fa/faCompilerTargets"*.cmake
cmake "${gen[@]}" -S "$SRC/examples" -B "$WORK/examples-rt" \
  -DCMAKE_PREFIX_PATH="$WORK/runtime-only" >"$WORK/configure-rt.log" &&
  cmake --build "$WORK/examples-rt" >/dev/null || { cat "$WORK/configure-rt.log"; exit 1; }
[ -x "$WORK/examples-rt/fa-example-forward" ] && [ ! -e "$WORK/examples-rt/fa-example-compile" ] ||
  { echo "FAILED: the runtime-only prefix built the wrong examples"; exit 1; }
echo "RESULT: install + find_package(fa) examples passed"
