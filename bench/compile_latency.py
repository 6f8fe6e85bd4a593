#!/usr/bin/env python3
"""Compile latency of fa (issue 18's goals), on the development machine.

  1. fa-aot --defaults, no cache, with -j 1 and -j <cores>: wall and CPU
     seconds (goal: the default bundle in <= 10 s on 2 cores), and each
     kernel's MLIR / LLVM / ptxas seconds as fa-aot reports them.
  2. The C++ JIT API (bin/fa-compile-bench): one new config cold, MLIR + LLVM
     against the 0.4 s goal with ptxas apart; an in-memory hit (<= 50 µs) and
     a disk-cache hit (<= 5 ms).
  3. The Python JIT (fa.jit): a miss compiled through fa-aot (first call, a
     process of its own), then a disk-cache hit from a new process (find +
     bundle load), both without a GPU.
A benchmark, not a test: it prints what it measured beside the goals.

    python3 bench/compile_latency.py --build build [--json out.json]
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r"^(\S+): .*mlir ([\d.]+) s, llvm ([\d.]+) s, ptxas ([\d.]+) s")
API_CONFIGS = ["fwd:bf16:d96:causal", "fwd:bf16:d128:causal:wgmma", "bwd:bf16:d128:causal:wgmma"]
PROBE = """
import sys, time
t0 = time.perf_counter()
import fa
b = fa.Bundle(None, sys.argv[1])
k = b.find(0, "bf16", 80, 80, "causal", (-1, -1), 90)
print(time.perf_counter() - t0, b._info(k)["tag"])
"""


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def aot_defaults(fa_aot, jobs, work):
    cpu0, t0 = children_cpu(), time.perf_counter()
    run = subprocess.run([fa_aot, "--defaults", "-j", str(jobs), "-o",
                          os.path.join(work, "defaults-j%d" % jobs)],
                         capture_output=True, text=True, check=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    kernels = [dict(tag=m[1], mlir=float(m[2]), llvm=float(m[3]), ptxas=float(m[4]))
               for m in map(LINE.match, run.stdout.splitlines()) if m]
    return {"jobs": jobs, "wall_s": wall, "cpu_s": cpu, "kernels": kernels}


def python_jit(build, work):
    env = dict(os.environ, FA_CACHE_DIR=os.path.join(work, "jit-cache"),
               FA_AOT=os.path.join(build, "bin", "fa-aot"),
               PYTHONPATH=os.path.join(HERE, "..", "python"))
    stub = os.path.join(build, "test", "Runtime", "cuda-stub")
    if os.path.isdir(stub):  # no driver here: the toolkit's stub libcuda
        env["LD_LIBRARY_PATH"] = stub + ":" + env.get("LD_LIBRARY_PATH", "")
    lib = os.path.join(build, "lib", "libfa_runtime.so")
    out = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", PROBE, lib], env=env, capture_output=True,
                             text=True, check=True)
        seconds, tag = run.stdout.split()
        out.append((float(seconds), tag))
    return {"first_call_s": out[0][0], "disk_hit_s": out[1][0], "tag": out[0][1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    fa_aot = os.path.join(build, "bin", "fa-aot")
    work = tempfile.mkdtemp(prefix="fa-compile-latency-")
    cores = os.cpu_count() or 1
    result = {"cores": cores, "load_average": os.getloadavg()}
    try:
        result["aot"] = [aot_defaults(fa_aot, j, work) for j in sorted({1, cores})]
        for r in result["aot"]:
            ks = r["kernels"]
            front = [k["mlir"] + k["llvm"] for k in ks]
            print("fa-aot --defaults -j %d: %d kernels in %.1f s wall, %.1f s CPU (goal <= 10 s "
                  "on 2 cores); per kernel MLIR+LLVM median %.2f s, max %.2f s; ptxas median "
                  "%.2f s, max %.2f s" % (r["jobs"], len(ks), r["wall_s"], r["cpu_s"],
                                          statistics.median(front), max(front),
                                          statistics.median(k["ptxas"] for k in ks),
                                          max(k["ptxas"] for k in ks)))
        run = subprocess.run([os.path.join(build, "bin", "fa-compile-bench"),
                              os.path.join(work, "api-cache")] + API_CONFIGS,
                             capture_output=True, text=True, check=True)
        result["api"] = run.stdout.splitlines()
        print("C++ JIT API (goals: MLIR+LLVM <= 0.4 s, memory hit <= 50 us, disk hit <= 5 ms):")
        for line in result["api"]:
            print("  " + line)
        result["python_jit"] = py = python_jit(build, work)
        print("Python JIT (fa.jit, through fa-aot): first call %.2f s (%s), disk-cache hit in a "
              "new process %.3f s (import fa + bundle load + find)"
              % (py["first_call_s"], py["tag"], py["disk_hit_s"]))
        print("load average during the run: %.1f %.1f %.1f (the machine is shared)"
              % os.getloadavg())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
