"""What the CPU Python tests share."""
import fa


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
