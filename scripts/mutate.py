#!/usr/bin/env python3
"""Mutation testing for fa: do the tests fail when the code is wrong?

Each mutant in test/mutants.json is one textual edit of one source line, or of
a few where one line alone is not unique (the exact original text, which must
occur once in the file, and its replacement)
with the suites expected to kill it. For each mutant the script applies the
edit in a scratch git worktree, rebuilds the targets its suites need (ninja
rebuilds only what changed; ccache serves the restored originals), runs the
suites in order until one fails, records killed/survived, and restores the
file. A mutant whose build fails is reported as invalid, not as killed.

test/mutants.json is a list, one mutant a line: {"name", "file", "original",
"replacement", "suites"} and, for a GPU-lowering mutant, "gpu": true and
"bundle": [fa-aot configs of the kernels it changes].

Suites (names used in test/mutants.json):
  lit:REGEX      lit on the scratch build's test dir, --filter REGEX
  fa-check-fwd   fa-check --direction fwd (random CPU cases vs float64)
  fa-check-bwd   fa-check --direction bwd (+ finite differences)
  runtime-unit   the GoogleTest runtime unit tests, through ctest

A GPU-lowering mutant ("gpu": true) that no suite kills is reported as
"survived (needs device)": only a GPU run can tell. With --bundles DIR such a
mutant that names fa-aot configs in "bundle" also gets DIR/<name>/ (fa-aot
of those configs, built from the mutated compiler), for a later device run.

Usage:
  scripts/mutate.py [--work DIR] [--rev REV] [--only NAME,...]
                    [--report FILE] [--bundles DIR] [--no-baseline]
                    [--all-suites] [--check-cases N] [--list]
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIT = shutil.which("lit") or "/usr/lib/llvm-22/bin/lit"

# Build targets each kind of suite needs (lit: see suite_targets).
SUITE_TARGETS = {
    "lit": ["fa-opt", "fa-aot", "fa-run", "fa-check"],
    "fa-check-fwd": ["fa-check"],
    "fa-check-bwd": ["fa-check"],
    "runtime-unit": ["fa-runtime-unit"],
}


def suite_targets(suite):
    """The tools a suite runs; a lit subset links only the tools it names."""
    kind = suite_kind(suite)
    if kind != "lit":
        return SUITE_TARGETS[kind]
    regex = suite.split(":", 1)[1]
    targets = ["fa-opt"]
    if "fa-aot" in regex or "AttnToGPU" == regex.strip("/"):
        targets.append("fa-aot")
    if "Integration" in regex:
        targets += ["fa-run", "fa-check"]
    return targets


def log(msg):
    print(msg, flush=True)


def run(cmd, cwd, timeout=None, env=None):
    """Runs `cmd`; returns (exit status, combined output); 124 on timeout."""
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, env=env,
                           text=True, errors="replace")
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        return 124, out + "\n[timed out after %ss]" % timeout


def load_mutants(path):
    with open(path) as f:
        mutants = json.load(f)
    names = set()
    for m in mutants:
        for key in ("name", "file", "original", "replacement", "suites"):
            if key not in m:
                sys.exit("mutants: %r lacks %r" % (m.get("name"), key))
        if m["name"] in names:
            sys.exit("mutants: duplicate name %r" % m["name"])
        if m["original"] == m["replacement"]:
            sys.exit("mutants: %r changes nothing" % m["name"])
        names.add(m["name"])
    return mutants


def suite_kind(suite):
    return suite.split(":", 1)[0]


def check_applicable(mutants, tree):
    """Every original must occur exactly once in its file."""
    bad = []
    for m in mutants:
        path = os.path.join(tree, m["file"])
        if not os.path.exists(path):
            bad.append("%s: no file %s" % (m["name"], m["file"]))
            continue
        with open(path) as f:
            n = f.read().count(m["original"])
        if n != 1:
            bad.append("%s: original occurs %d times in %s" %
                       (m["name"], n, m["file"]))
    return bad


def ensure_worktree(work, build_type, rev):
    """A detached worktree of `rev` at `work`, configured for ninja."""
    head = subprocess.check_output(["git", "-C", ROOT, "rev-parse", rev],
                                   text=True).strip()
    if not os.path.exists(os.path.join(work, ".git")):
        subprocess.check_call(["git", "-C", ROOT, "worktree", "add", "--detach",
                               work, head])
    else:
        # Follow the requested revision (the tests may have changed).
        subprocess.check_call(["git", "-C", work, "checkout", "--detach",
                               "--quiet", head])
    dirty = subprocess.check_output(["git", "-C", work, "status",
                                     "--porcelain", "--untracked-files=no"],
                                    text=True).strip()
    if dirty:
        sys.exit("scratch tree %s has local changes:\n%s" % (work, dirty))
    build = os.path.join(work, "build")
    if not os.path.exists(os.path.join(build, "build.ninja")):
        cmd = ["cmake", "-G", "Ninja", "-S", work, "-B", build,
               "-DCMAKE_BUILD_TYPE=" + build_type,
               "-DLLVM_EXTERNAL_LIT=" + LIT]
        if shutil.which("ccache"):
            cmd += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                    "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        subprocess.check_call(cmd)
    return head


def build(work, targets, jobs):
    cmd = ["ninja", "-C", os.path.join(work, "build"), "-j", str(jobs)]
    return run(cmd + sorted(set(targets)), work)


def run_suite(suite, work, args):
    b = os.path.join(work, "build")
    kind = suite_kind(suite)
    if kind == "lit":
        regex = suite.split(":", 1)[1]
        cmd = [LIT, "-q", os.path.join(b, "test"), "--filter", regex]
        rc, out = run(cmd, work, timeout=args.timeout)
        if "did not match any tests" in out or "Testing: 0 tests" in out:
            return 2, "lit filter %r selects no test\n%s" % (regex, out)
        return rc, out
    if kind == "fa-check-fwd":
        cmd = [os.path.join(b, "bin", "fa-check"), "--direction", "fwd",
               "--cases", str(args.check_cases), "--seed", "7"]
        return run(cmd, work, timeout=args.timeout)
    if kind == "fa-check-bwd":
        cmd = [os.path.join(b, "bin", "fa-check"), "--direction", "bwd",
               "--cases", str(args.check_cases), "--seed", "8",
               "--fd-cases", str(args.fd_cases)]
        return run(cmd, work, timeout=args.timeout)
    if kind == "runtime-unit":
        cmd = ["ctest", "--test-dir", b, "-R", "^runtime-unit$", "--no-tests=error",
               "--output-on-failure"]
        return run(cmd, work, timeout=args.timeout)
    sys.exit("unknown suite %r" % suite)


def suite_failed(suite, rc, out):
    """Whether the suite reports a failure (its exit status is non-zero)."""
    return rc != 0


def first_lines(text, n=6):
    lines = [l for l in text.splitlines() if l.strip()]
    keep = [l for l in lines if re.search(
        r"FAIL|error|failed|Failed|mismatch|timed out|CHECK", l)]
    return "\n".join((keep or lines)[:n])


def write_bundle(m, work, bundles):
    configs = m.get("bundle") or []
    if not configs:
        return None
    out = os.path.join(os.path.abspath(bundles), m["name"])
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(work, "build", "bin", "fa-aot"), "-o", out]
    for c in configs:
        cmd += ["--config", c]
    rc, text = run(cmd, work, timeout=600)
    with open(os.path.join(os.path.abspath(bundles), m["name"] + ".log"),
              "w") as f:
        f.write(" ".join(shlex.quote(c) for c in cmd) + "\n" + text)
    return out if rc == 0 else None


def mutate_one(m, work, args):
    path = os.path.join(work, m["file"])
    with open(path) as f:
        original = f.read()
    result = {"name": m["name"], "file": m["file"], "expected": m["suites"],
              "original": m["original"], "replacement": m["replacement"],
              "killed_by": [], "ran": [], "status": None, "detail": "",
              "bundle": None}
    t0 = time.time()
    try:
        with open(path, "w") as f:
            f.write(original.replace(m["original"], m["replacement"], 1))
        targets = []
        for s in m["suites"]:
            targets += suite_targets(s)
        if args.bundles and m.get("bundle"):
            targets.append("fa-aot")
        rc, out = build(work, targets, args.jobs)
        if rc != 0:
            result["status"] = "invalid"
            result["detail"] = "build failed: " + first_lines(out)
            return result
        for s in m["suites"]:
            ts = time.time()
            rc, out = run_suite(s, work, args)
            result["ran"].append("%s (%.0fs)" % (s, time.time() - ts))
            if rc == 2 and "selects no test" in out:
                result["status"] = "invalid"
                result["detail"] = out.splitlines()[0]
                return result
            if suite_failed(s, rc, out):
                result["killed_by"].append(s)
                if not result["detail"]:
                    result["detail"] = first_lines(out, 3)
                if not args.all_suites:
                    break
        if result["killed_by"]:
            result["status"] = "killed"
        elif m.get("gpu"):
            # Only a GPU run can tell: keep the mutated kernels for one.
            result["status"] = "survived (needs device)"
            if args.bundles and m.get("bundle"):
                result["bundle"] = write_bundle(m, work, args.bundles)
        else:
            result["status"] = "survived"
        return result
    finally:
        with open(path, "w") as f:
            f.write(original)
        result["seconds"] = round(time.time() - t0)


def baseline(mutants, work, args):
    """Every suite the mutants name must pass on the unmutated tree."""
    suites = []
    for m in mutants:
        for s in m["suites"]:
            if s not in suites:
                suites.append(s)
    targets = sorted({t for s in suites for t in suite_targets(s)})
    rc, out = build(work, targets, args.jobs)
    if rc != 0:
        sys.exit("baseline build failed:\n" + out[-4000:])
    failed = []
    for s in suites:
        ts = time.time()
        rc, out = run_suite(s, work, args)
        log("baseline %-50s %s (%.0fs)" % (s, "ok" if rc == 0 else "FAILED",
                                            time.time() - ts))
        if rc != 0:
            failed.append((s, out))
    if failed:
        for s, out in failed:
            log("---- %s\n%s" % (s, out[-3000:]))
        sys.exit("baseline: %d suites fail without a mutant" % len(failed))


def report(results, head, args, path):
    killed = [r for r in results if r["status"] == "killed"]
    survived = [r for r in results if r["status"].startswith("survived")]
    invalid = [r for r in results if r["status"] == "invalid"]
    lines = [
        "## Run of %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
        "",
        "Commit %s; %d mutants: %d killed, %d survived, %d invalid "
        "(fa-check with %d cases, %d finite-difference cases)." %
        (head[:12], len(results), len(killed), len(survived), len(invalid),
         args.check_cases, args.fd_cases),
        "",
        "| mutant | file | change | result | killed by |",
        "|---|---|---|---|---|",
    ]
    def cell(text):
        # One table row: an edit spanning lines shows its lines joined by ⏎.
        return " ⏎ ".join(l.strip() for l in text.strip().splitlines()).replace("|", "\\|")

    for r in results:
        lines.append("| %s | %s | `%s` → `%s` | %s | %s |" % (
            r["name"], r["file"].replace("lib/", ""),
            cell(r["original"]), cell(r["replacement"]), r["status"],
            ("; ".join("`%s`" % k + (" (" + r["detail"].splitlines()[0] + ")"
                                      if i == 0 and r["detail"] else "")
                       for i, k in enumerate(r["killed_by"])) or "—")
            .replace("|", "\\|")))
    lines.append("")
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")
    with open(path + ".json", "w") as f:
        json.dump(results, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mutants", default=os.path.join(ROOT, "test", "mutants.json"))
    p.add_argument("--work", default=os.path.join(os.path.dirname(ROOT),
                                                  os.path.basename(ROOT) + "-mutants"),
                   help="scratch worktree (created from HEAD if missing)")
    p.add_argument("--rev", default="HEAD",
                   help="revision whose sources and tests are mutated "
                        "(an older one shows what its tests missed)")
    p.add_argument("--only", help="comma-separated mutant names")
    p.add_argument("--report", help="append a markdown table to this file")
    p.add_argument("--bundles", help="write fa-aot bundles of GPU mutants here")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=int, default=900,
                   help="seconds per suite (a timeout counts as a kill)")
    p.add_argument("--check-cases", type=int, default=60)
    p.add_argument("--fd-cases", type=int, default=4)
    p.add_argument("--build-type", default="Release")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--all-suites", action="store_true",
                   help="run every listed suite, not only up to the first kill")
    p.add_argument("--list", action="store_true", help="check and list mutants")
    args = p.parse_args()

    mutants = load_mutants(args.mutants)
    if args.only:
        want = args.only.split(",")
        unknown = set(want) - {m["name"] for m in mutants}
        if unknown:
            sys.exit("unknown mutants: " + ", ".join(sorted(unknown)))
        mutants = [m for m in mutants if m["name"] in want]
    bad = check_applicable(mutants, ROOT)
    if bad:
        sys.exit("mutants that do not apply:\n  " + "\n  ".join(bad))
    if args.list:
        for m in mutants:
            log("%-28s %-45s %s" % (m["name"], m["file"], " ".join(m["suites"])))
        return

    work = os.path.abspath(args.work)
    head = ensure_worktree(work, args.build_type, args.rev)
    bad = check_applicable(mutants, work)
    if bad:
        sys.exit("mutants that do not apply to %s:\n  %s" % (work, "\n  ".join(bad)))
    if args.bundles:
        os.makedirs(args.bundles, exist_ok=True)
    if not args.no_baseline:
        baseline(mutants, work, args)
    results = []
    for i, m in enumerate(mutants):
        r = mutate_one(m, work, args)
        results.append(r)
        log("[%d/%d] %-28s %-24s %-28s %4ds  %s" % (
            i + 1, len(mutants), r["name"], r["status"],
            ",".join(r["killed_by"]) or "-", r["seconds"],
            r["detail"].splitlines()[0] if r["detail"] else ""))
        if r["bundle"]:
            log("        bundle: %s" % r["bundle"])
        if args.report:
            with open(args.report + ".json", "w") as f:
                json.dump(results, f, indent=1)
    # Leave the scratch build matching the unmutated sources.
    build(work, sorted({t for ts in SUITE_TARGETS.values() for t in ts}),
          args.jobs)
    n_killed = sum(r["status"] == "killed" for r in results)
    log("%d/%d killed" % (n_killed, len(results)))
    for r in results:
        if r["status"] != "killed":
            log("  %s: %s" % (r["status"], r["name"]))
    if args.report:
        report(results, head, args, args.report)


if __name__ == "__main__":
    main()
