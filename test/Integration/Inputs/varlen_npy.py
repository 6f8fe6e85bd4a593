"""Writes the inputs of Inputs/varlen.mlir: packed Q [5,2,4], K and V [7,1,4],
good cu_seqlens and bad ones (not starting at 0, decreasing, ending short)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import npy  # noqa: E402

d = sys.argv[1]
npy.save(d + "/q.npy", (5, 2, 4), [0.1 * (i % 7) for i in range(40)])
npy.save(d + "/k.npy", (7, 1, 4), [0.2 * (i % 5) for i in range(28)])
npy.save(d + "/v.npy", (7, 1, 4), [0.3 * (i % 3) for i in range(28)])
for name, offsets in [("cuq", [0, 2, 5]), ("cuk", [0, 3, 7]), ("start", [1, 2, 5]),
                      ("down", [0, 4, 3]), ("short", [0, 3, 6])]:
    npy.save("%s/%s.npy" % (d, name), (3,), offsets)
