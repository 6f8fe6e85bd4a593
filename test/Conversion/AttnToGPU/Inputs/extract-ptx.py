# Writes the PTX of each gpu.binary in an MLIR file to <dir>/<symbol>.ptx.
import re
import sys

text = open(sys.argv[1]).read()
for m in re.finditer(r'gpu\.binary @(\S+)\s.*?assembly = "((?:[^"\\]|\\.)*)"', text, re.S):
    ptx = re.sub(r"\\([0-9A-Fa-f]{2})", lambda h: chr(int(h.group(1), 16)), m.group(2))
    with open(f"{sys.argv[2]}/{m.group(1)}.ptx", "w") as f:
        f.write(ptx)
