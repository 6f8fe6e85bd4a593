"""Writes malformed .npy files, one per class of bad header or size, for
fa-run-npy-invalid.test. Each is a [1, 1, 5, 4] f32 array but for its fault."""
import struct
import sys

GOOD = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 5, 4), }"


def write(path, header, values=20, version=(1, 0), raw=None):
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H" if version[0] == 1 else "<I", len(header))
    data = raw if raw is not None else struct.pack("<%df" % values, *([0.25] * values))
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes(version) + length + header.encode() + data)


def shape(dims):
    return GOOD.replace("(1, 1, 5, 4)", "(%s)" % dims)


d = sys.argv[1]
write(d + "/good.npy", GOOD)
write(d + "/good_v2.npy", GOOD, version=(2, 0))
write(d + "/huge.npy", shape("100000, 100000, 100000, 4"))
write(d + "/over62.npy", shape("99999999999999999999, 1, 5, 4"))
write(d + "/wraps.npy", shape("4294967296, 4294967296, 1, 4"), values=0)
write(d + "/fraction.npy", shape("1, 1, 5.9, 4"))
write(d + "/suffix.npy", shape("1, 1, 5abc, 4"))
write(d + "/negative.npy", shape("1, 1, -5, 4"))
write(d + "/short.npy", GOOD, values=19)
write(d + "/long.npy", GOOD, values=21)
write(d + "/fortran_str.npy", GOOD.replace("False", "'True'"))
write(d + "/fortran.npy", GOOD.replace("False", "True"))
write(d + "/version.npy", GOOD, version=(9, 0))
write(d + "/minor.npy", GOOD, version=(1, 7))
write(d + "/no_shape.npy", "{'descr': '<f4', 'fortran_order': False, }")
write(d + "/twice.npy", GOOD[:-1] + "'shape': (1, 1, 5, 4), }")
write(d + "/unknown_key.npy", GOOD[:-1] + "'order': 'C', }")
write(d + "/not_dict.npy", "[1, 2, 3]")
write(d + "/trailing.npy", GOOD + " junk")
write(d + "/descr_type.npy", GOOD.replace("'<f4'", "4"))
