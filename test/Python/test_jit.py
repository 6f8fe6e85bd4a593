#!/usr/bin/env python3
"""JIT on a bundle miss (python/fa/jit.py), without a GPU or PyTorch: a query
the loaded bundle lacks is compiled by fa-aot into the disk cache and loaded;
a later process reuses it without compiling (nor asking the compiler its
version again); the compiler rebuilt in place with another --version
compiles anew; processes compiling one config at once all get a
complete entry; with no compiler the error names the config and the fa-aot
command, which builds it; an fp8 query compiles the kernel of its descale
form (per head, or blockscale). fa-aot runs through a wrapper that logs each
compile, so "no recompile" is counted, not assumed.

    test_jit.py --fa-aot build/bin/fa-aot --lib build/lib/libfa_runtime.so \
        --bundle build/test/Runtime/fixture-bundle
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "python", "fa")

# The fixture bundle has bf16 d64/d128 kernels only: d32 is a miss.
MISS = "fwd:bf16:d32:none:mma_sync:sm_90a"
PROBE = textwrap.dedent("""
    import json, os, sys, fa
    b = fa.Bundle(sys.argv[1], sys.argv[2])
    try:
        k = b.find(0, "bf16", 32, 32, "none", (-1, -1), 90,
                   score_mod=os.environ.get("FA_TEST_MOD"))
        print(json.dumps({"tag": b._info(k)["tag"], "dirs": b.dirs}))
    except fa.FaError as e:
        print(json.dumps({"error": str(e), "status": e.status}))
""")

# fp8 on a miss, per head and with block descales: each form compiles its
# own kernel, which the other form's query does not take.
FP8_PROBE = textwrap.dedent("""
    import json, sys, fa
    b = fa.Bundle(sys.argv[1], sys.argv[2])
    out = {}
    for block in (0, 64):
        k = b.find(0, "f8e4m3", 128, 128, "causal", (-1, -1), 90, descale_block=block)
        info = b._info(k)
        out[str(block)] = [info["tag"], info["descale_block"]]
    print(json.dumps(out))
""")

# Decode on a miss: the packed split-KV kernel for the rows of a key head.
DECODE_PROBE = textwrap.dedent("""
    import json, os, sys, fa
    b = fa.Bundle(sys.argv[1], sys.argv[2])
    tags = []
    for rows, cap in (((4, 1), 90), ((4, 16), 90), ((4, 1), 80)):
        k = b.find_splitkv("bf16", 128, 128, "none", (-1, -1), cap, 8192, packed=True,
                           rows=rows)
        tags.append(b._info(k)["tag"] if k else None)
    unpacked = b.find_splitkv("bf16", 128, 128, "none", (-1, -1), 90, 8192, rows=(1, 64))
    out = {"tags": tags, "unpacked_at_64_rows": bool(unpacked)}
    if os.environ.get("FA_SCORE_MODS"):
        # A decode with a score_mod compiles its own packed split kernel.
        k = b.find_splitkv("bf16", 128, 128, "none", (-1, -1), 90, 8192, packed=True,
                           rows=(4, 1), score_mod="alibi_slopes")
        info = b._info(k) if k else {}
        out["mod"] = [info.get("tag"), info.get("mod_args"), info.get("split_kv"),
                      info.get("pack_gqa")]
    print(json.dumps(out))
""")


def wrapper(path, real, log, version_suffix=""):
    """An fa-aot that logs each compile to `log` and each --version to
    `log`.version, and can report another version."""
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "if [ \"$1\" = --version ]; then\n"
                "  echo version >> %s.version\n"
                "  echo \"$(%s --version)%s\"; exit 0\nfi\n"
                "echo \"$*\" >> %s\nexec %s \"$@\"\n"
                % (log, real, version_suffix, log, real))
    os.chmod(path, 0o755)
    return path


def probe(args, env, pythonpath, n=1, script=PROBE):
    """Runs `script` in n processes at once; their JSON answers."""
    full = dict(os.environ, PYTHONPATH=pythonpath, **env)
    procs = [subprocess.Popen([sys.executable, "-c", script, args.bundle, args.lib], env=full,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, "probe failed (%d): %s" % (p.returncode, stderr)
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def compiles(log):
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return sum(1 for _ in f)


def entries(cache):
    """Cache entries (directories with a manifest) and leftovers of compiles."""
    done, partial = [], []
    for root, dirs, files in os.walk(os.path.join(cache, "jit")):
        for d in dirs:
            (partial if d.startswith(".compiling-") else done).append(os.path.join(root, d))
    done = [d for d in done if os.path.exists(os.path.join(d, "manifest.json"))]
    return done, partial


def check_instruction_choice():
    """On sm_90 the JIT asks for wgmma exactly where fa's wgmma kernels exist
    (D/Dv 64, 96, 128, 256, 192/128, forward and backward)."""
    sys.path.insert(0, os.path.dirname(PACKAGE))
    from fa import jit
    for direction, d, dv, want in ((0, 64, 0, "wgmma"), (0, 96, 0, "wgmma"), (0, 256, 256, "wgmma"),
                                   (0, 192, 128, "wgmma"), (0, 80, 0, "mma_sync"),
                                   (0, 128, 256, "mma_sync"), (1, 128, 0, "wgmma"),
                                   (1, 96, 0, "wgmma"), (1, 256, 0, "wgmma"),
                                   (1, 192, 128, "wgmma"), (1, 80, 0, "mma_sync")):
        got = jit.config_text(direction, "bf16", d, dv, "causal", (-1, -1), 90)
        assert got.split(":")[-2] == want, (direction, d, dv, got)
        sm80 = jit.config_text(direction, "bf16", d, dv, "causal", (-1, -1), 80)
        assert sm80.split(":")[-2] == "mma_sync", sm80
    # The d64 backward's 128-row tiles (as --defaults): dense, no mask or causal, no
    # mods or determinism; the others keep 64 rows (the compiler refuses 128 there).
    wide = lambda *a, **k: jit.config_text(1, "bf16", 64, 0, *a, wide_rows=True, **k)
    assert wide("none", (-1, -1), 90) == "bwd:bf16:d64:none:wgmma:bq128:sm_90a"
    assert wide("causal", (-1, -1), 90) == "bwd:bf16:d64:causal:wgmma:bq128:sm_90a"
    assert wide("none", (-1, -1), 90, "wgmma", True) == "bwd:bf16:d64:none:wgmma:det:sm_90a"
    assert "bq128" not in wide("window", (8, 8), 90) + wide("causal_bottom_right", (-1, -1), 90)
    assert "bq128" not in wide("none", (-1, -1), 80) + wide("none", (-1, -1), 90, "wgmma",
                                                             False, "softcap30")
    assert "bq128" not in jit.config_text(1, "bf16", 64, 0, "none", (-1, -1), 90)
    # fp8: the wgmma forwards at d128 and d256 (fa-aot refuses other head dims).
    for d in (128, 256):
        got = jit.config_text(0, "f8e4m3", d, d, "causal", (-1, -1), 90)
        assert got == "fwd:f8e4m3:d%d:causal:wgmma:sm_90a" % d, got
        block = jit.config_text(0, "f8e4m3", d, d, "causal", (-1, -1), 90, descale_block=64)
        assert block == got + ":blockscale", block
    print("ok the JIT's instruction choice follows the compiler's wgmma head dims")


def check_decode_configs():
    """jit.decode_config: the TMA tiles of --defaults on sm_90a without a
    mask (16 rows where a key head's rows fit, else 32; none past a group of
    32 heads), the compiler's split kernel elsewhere."""
    sys.path.insert(0, os.path.dirname(PACKAGE))
    from fa import jit
    none = (-1, -1)
    for args, want in (
            (("bf16", 128, 128, "none", none, 90, True, (4, 1)),
             "fwd:bf16:d128:none:mma_sync:sm_90a:packgqa:splitkv:bq16:w1:pw:tma"),
            (("f16", 64, 0, "none", none, 90, True, (8, 4)),
             "fwd:f16:d64:none:mma_sync:sm_90a:packgqa:splitkv:bq32:w2:pw:tma"),
            (("bf16", 128, 128, "none", none, 90, True, (64, 1)),
             "fwd:bf16:d128:none:mma_sync:sm_90a:packgqa:splitkv"),
            (("bf16", 128, 128, "causal_bottom_right", none, 90, True, (4, 1)),
             "fwd:bf16:d128:causal_bottom_right:mma_sync:sm_90a:packgqa:splitkv"),
            (("bf16", 96, 96, "none", none, 90, True, (4, 1)),
             "fwd:bf16:d96:none:mma_sync:sm_90a:packgqa:splitkv"),
            (("bf16", 128, 128, "none", none, 80, True, (4, 1)),
             "fwd:bf16:d128:none:mma_sync:sm_80:packgqa:splitkv"),
            (("bf16", 128, 128, "none", none, 90, False, (1, 1)),
             "fwd:bf16:d128:none:mma_sync:sm_90a:splitkv"),
            (("bf16", 128, 128, "none", none, 90, True, (4, 1), "softcap30", "prefix_lm"),
             "fwd:bf16:d128:none:mma_sync:sm_90a:mod=softcap30:maskmod=prefix_lm:packgqa:"
             "splitkv:bq16:w1:pw:tma")):
        got = jit.decode_config(*args)
        assert got == want, (args, got, want)
    print("ok the decode configs compiled on a miss follow --defaults' tiles")


def main():
    check_instruction_choice()
    check_decode_configs()
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fa-aot", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bundle", required=True)
    args = ap.parse_args()
    args.fa_aot, args.lib = os.path.abspath(args.fa_aot), os.path.abspath(args.lib)
    work = tempfile.mkdtemp(prefix="fa-jit-test-")
    try:
        # The package alone, away from this checkout's build directories, so
        # only FA_AOT or PATH can provide a compiler.
        pkg_root = os.path.join(work, "site")
        shutil.copytree(PACKAGE, os.path.join(pkg_root, "fa"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        cache, log = os.path.join(work, "cache"), os.path.join(work, "compiles.log")
        aot = wrapper(os.path.join(work, "fa-aot"), args.fa_aot, log)
        env = {"FA_CACHE_DIR": cache, "FA_AOT": aot}

        first, = probe(args, env, pkg_root)
        assert first.get("tag", "").startswith("fwd_bf16_d32_"), first
        assert compiles(log) == 1, "expected one compile, log has %d" % compiles(log)
        done, partial = entries(cache)
        assert len(done) == 1 and not partial, (done, partial)
        assert first["dirs"][-1] == done[0], (first["dirs"], done)
        print("ok compile on a miss: %s from %s" % (first["tag"], done[0]))

        asked = compiles(log + ".version")
        again, = probe(args, env, pkg_root)
        assert again == first and compiles(log) == 1, (again, compiles(log))
        assert compiles(log + ".version") == asked, "the compiler's version was asked again"
        print("ok cache hit in a new process: no compile, the compiler's version remembered")

        # The compiler rebuilt in place: another version at the same path.
        wrapper(aot, args.fa_aot, log, " (rebuilt)")
        changed, = probe(args, env, pkg_root)
        assert changed.get("tag") == first["tag"] and compiles(log) == 2, (changed, compiles(log))
        assert changed["dirs"][-1] != first["dirs"][-1], changed
        print("ok the compiler rebuilt with another version compiles anew into %s"
              % changed["dirs"][-1])

        racers = probe(args, dict(env, FA_CACHE_DIR=os.path.join(work, "race")), pkg_root, n=6)
        assert all(r.get("tag") == first["tag"] for r in racers), racers
        done, partial = entries(os.path.join(work, "race"))
        assert len(done) == 1 and not partial, (done, partial)
        assert len({r["dirs"][-1] for r in racers}) == 1, racers
        with open(os.path.join(done[0], "manifest.json")) as f:
            assert [k["tag"] for k in json.load(f)["kernels"]] == [first["tag"]]
        print("ok 6 processes compiling at once: one complete entry, no leftovers")

        bare = {"FA_CACHE_DIR": os.path.join(work, "none"), "FA_AOT": "",
                "PATH": "/usr/bin:/bin"}
        missing, = probe(args, bare, pkg_root)
        err = missing.get("error", "")
        assert missing.get("status") == 2 and "has no kernel for" in err, missing
        command = "fa-aot --config %s -o <dir>" % MISS
        assert "kernel %s" % MISS in err and command in err, err
        built = os.path.join(work, "built")
        subprocess.run([args.fa_aot, "--config", MISS, "-o", built], check=True,
                       capture_output=True)
        with open(os.path.join(built, "manifest.json")) as f:
            assert json.load(f)["kernels"][0]["tag"] == first["tag"]
        print("ok no compiler: the error names %s and '%s', which builds it" % (MISS, command))

        mods = os.path.join(HERE, "..", "gpu", "score_mods.mlir")
        modded, = probe(args, dict(env, FA_TEST_MOD="softcap30", FA_SCORE_MODS=mods), pkg_root)
        assert modded.get("tag", "").endswith("_mod_softcap30"), modded
        assert "-mods-" in modded["dirs"][-1], modded
        unmodded, = probe(args, dict(env, FA_TEST_MOD="softcap30"), pkg_root)
        assert "needs the score_mod library" in unmodded.get("error", ""), unmodded
        print("ok a score_mod config compiles against $FA_SCORE_MODS (%s), and without it the "
              "error says so" % modded["tag"])

        decode, = probe(args, env, pkg_root, script=DECODE_PROBE)
        small, large, sm80 = decode.get("tags") or (None,) * 3
        assert small == "fwd_bf16_d128_bq16_bkv64_w1_s2_none_sm90a_packgqa_splitkv_pw_tma", decode
        assert large == "fwd_bf16_d128_bq32_bkv64_w2_s2_none_sm90a_packgqa_splitkv_pw_tma", decode
        assert sm80 and sm80.endswith("_sm80_packgqa_splitkv"), decode
        assert not decode["unpacked_at_64_rows"], decode
        print("ok decode on a miss: %s for 4 rows of a key head, %s for 64, %s on sm_80; no "
              "split kernel compiled for 64 query rows" % (small, large, sm80))
        decode, = probe(args, dict(env, FA_SCORE_MODS=mods), pkg_root, script=DECODE_PROBE)
        tag, mod_args, split_kv, pack_gqa = decode.get("mod") or (None,) * 4
        assert tag == small + "_mod_alibi_slopes", decode
        assert mod_args == [{"dtype": "f32", "dims": ["heads"]}] and split_kv and pack_gqa, decode
        print("ok decode with a score_mod on a miss: %s, reading %s" % (tag, mod_args))

        fp8, = probe(args, env, pkg_root, script=FP8_PROBE)
        per_head, block = fp8.get("0"), fp8.get("64")
        assert per_head == ["fwd_f8e4m3_d128_bq128_bkv192_w12_s2_causal_wgmma_sm90a", 0], fp8
        assert block == [per_head[0] + "_bs64", 64], fp8
        print("ok fp8 on a miss: %s per head, %s with block descales" % (per_head[0], block[0]))

        broken, = probe(args, dict(bare, FA_AOT=os.path.join(work, "no-such-fa-aot")), pkg_root)
        assert "FA_AOT is" in broken.get("error", ""), broken
        print("ok FA_AOT naming no executable: %s" % broken["error"].splitlines()[-1][:120])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT: JIT tests passed")


if __name__ == "__main__":
    main()
