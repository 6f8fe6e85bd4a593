# -*- Python -*-
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "fa"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.fa_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.fa_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
tools = ["fa-opt", "fa-run", "fa-aot", "FileCheck", "not", "count"]
llvm_config.add_tool_substitutions(tools, [config.fa_tools_dir, config.llvm_tools_dir])
config.substitutions.append(("%python", shutil.which("python3") or "python3"))
config.substitutions.append(("%fa_src", os.path.dirname(config.test_source_root)))
config.substitutions.append(("%fa_tools", config.fa_tools_dir))

# ptxas is present where the CUDA toolkit is; GPU execution never is in CI.
ptxas = os.path.join(config.cuda_root, "bin", "ptxas")
if os.path.exists(ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
if os.environ.get("FA_HAVE_GPU") == "1":
    config.available_features.add("gpu")
