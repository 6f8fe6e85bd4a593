#!/usr/bin/env python3
"""Fails unless the given shared library depends only on the CUDA driver and
the C/C++ runtime: a deployment machine has no MLIR or LLVM."""
import re
import subprocess
import sys

ALLOWED = re.compile(r"^(libcuda\.so\.1|libstdc\+\+\.so\.6|libc\.so\.6|libm\.so\.6|"
                     r"libgcc_s\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|"
                     r"libpthread\.so\.0|libdl\.so\.2|librt\.so\.1)$")


def main(path):
    dyn = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)
    if "libcuda.so.1" not in needed:
        print("FAIL: %s does not link libcuda: %s" % (path, needed))
        return 1
    bad = [n for n in needed if not ALLOWED.match(n)]
    syms = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True,
                          text=True, check=True).stdout
    foreign = [l.split()[-1] for l in syms.splitlines()
               if re.search(r"_ZN?K?\d*(4llvm|4mlir)", l)]
    if bad or foreign:
        print("FAIL: %s depends on %s %s" % (path, bad, foreign[:5]))
        return 1
    print("ok: NEEDED %s" % needed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
