"""Writes small .npy inputs and checks fa-run's outputs against a pure-Python
float64 attention, so the fa-run tests need no NumPy."""
import math
import struct
import sys


def save(path, shape, values, descr="<f4"):
    fmt = {"<f4": "f", "<f8": "d", "<i4": "i"}[descr]
    dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)))
        f.write(header.encode() + struct.pack("<%d%s" % (len(values), fmt), *values))


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + hlen].decode()
    shape = tuple(int(x) for x in header.split("(")[1].split(")")[0].split(",") if x.strip())
    n = 1
    for d in shape:
        n *= d
    return shape, struct.unpack("<%df" % n, data[10 + hlen:10 + hlen + 4 * n])


# B=1, H=2, Hkv=1, Nq=3, Nk=5, D=4, Dv=2; causal bottom-right.
Q = [(0.1 * i) % 1.3 - 0.6 for i in range(2 * 3 * 4)]
K = [(0.37 * i) % 1.1 - 0.5 for i in range(5 * 4)]
V = [(0.23 * i) % 0.9 - 0.4 for i in range(5 * 2)]


def reference():
    o, lse = [], []
    for h in range(2):
        for i in range(3):
            s = []
            for j in range(5):
                if j > i + 2:  # bottom-right: Nk - Nq = 2
                    continue
                dot = sum(Q[(h * 3 + i) * 4 + d] * K[j * 4 + d] for d in range(4))
                s.append((j, dot / 2.0))
            m = max(x for _, x in s)
            l = sum(math.exp(x - m) for _, x in s)
            lse.append(m + math.log(l))
            for e in range(2):
                o.append(sum(math.exp(x - m) / l * V[j * 2 + e] for j, x in s))
    return o, lse


def main():
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "make":
        save(d + "/q.npy", (1, 2, 3, 4), Q)
        save(d + "/k.npy", (1, 1, 5, 4), K, "<f8")
        save(d + "/v.npy", (1, 1, 5, 2), V)
        save(d + "/bad_shape.npy", (1, 1, 6, 2), V + [0.0, 0.0])
        save(d + "/bad_dtype.npy", (1, 1, 5, 2), list(range(10)), "<i4")
        with open(d + "/truncated.npy", "wb") as f:
            f.write(b"\x93NUMPY\x01\x00")
    else:
        o_shape, o = load(d + "/o.npy")
        l_shape, lse = load(d + "/lse.npy")
        ro, rl = reference()
        err = max(max(abs(a - b) for a, b in zip(o, ro)), max(abs(a - b) for a, b in zip(lse, rl)))
        print("o", o_shape, "lse", l_shape, "max error %.2e" % err)
        print("OK" if err < 1e-5 else "MISMATCH")


if __name__ == "__main__":
    main()
