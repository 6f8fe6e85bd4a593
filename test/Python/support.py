"""What the CPU Python tests share."""
import fa
from fa._runtime import Tensor


def expect_error(fn, *needles):
    """fn() must raise fa.FaError with each of `needles` in its message;
    returns the message."""
    try:
        fn()
    except fa.FaError as e:
        for n in needles:
            assert n in str(e), "expected %r in: %s" % (n, e)
        return str(e)
    raise AssertionError("expected an FaError with %r" % (needles,))


def fake_tensor(address, dtype, shape):
    """A contiguous fa_tensor at a fake device address (GPU-free checks)."""
    t = Tensor()
    t.data, t.dtype, t.rank = address, dtype, len(shape)
    step = 1
    for i in reversed(range(len(shape))):
        t.shape[i], t.strides[i] = shape[i], step
        step *= shape[i]
    return t
