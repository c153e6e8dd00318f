"""Loads the ferry torch extension and checks it against torch's own results on random data.

usage: python3 check.py path/to/libferry_torch.so
Prints one line per check and "N passed, 0 failed" at the end; exits non-zero on any failure.
"""
import sys

import torch


def main(library):
    torch.ops.load_library(library)
    gen = torch.Generator().manual_seed(20261201)
    passed = 0

    def check(name, ok):
        nonlocal passed
        if not ok:
            raise AssertionError(f"FAILED: {name}")
        passed += 1
        print(f"ok: {name}")

    def random(shape, dtype):
        if dtype.is_floating_point:
            return (torch.rand(shape, generator=gen) * 2000 - 1000).to(dtype)
        return torch.randint(-(2**31), 2**31 - 1, shape, generator=gen, dtype=dtype)

    def raises(name, fn, text):
        try:
            fn()
        except Exception as e:  # torch wraps C++ exceptions in RuntimeError and friends
            check(f"{name} raises ({text})", "ferry: " in str(e) and text in str(e))
            return
        check(f"{name} raises ({text})", False)

    # async_h2d: pageable and pinned sources, every instantiated dtype, compared with torch's copy.
    for dtype in (torch.float32, torch.int64, torch.int32, torch.bfloat16):
        src = random((37, 129), dtype)
        for pinned in (False, True):
            s = src.pin_memory() if pinned else src
            dst = torch.full_like(src, 7, device="cuda")
            torch.ops.ferry.async_h2d(s, dst)
            torch.cuda.current_stream().synchronize()
            check(f"async_h2d {dtype} pinned={pinned}", torch.equal(dst, src.to("cuda")))

    # The checks of <ferry/interop/torch.hpp>, through the extension.
    dst = torch.zeros(64, device="cuda")
    raises("a float64 source into float32", lambda: torch.ops.ferry.async_h2d(random(64, torch.float64), dst),
           "dtype mismatch")
    raises("a non-contiguous destination",
           lambda: torch.ops.ferry.async_h2d(random((8, 8), torch.float32), torch.zeros(8, 16, device="cuda")[:, ::2]),
           "not row-major contiguous")
    raises("a CPU destination", lambda: torch.ops.ferry.async_h2d(random(64, torch.float32), torch.zeros(64)),
           "device type mismatch")
    raises("a destination smaller than the source",
           lambda: torch.ops.ferry.async_h2d(random(65, torch.float32), dst), "the source has")

    # StagedWrite over a tensor made by torch (random contents, kept): random writes (later ones
    # win), applied with one launch on torch's current stream (a side stream here) into that very
    # tensor, against torch's own slice assignment on a clone.
    rows, cols = 300, 257
    target = torch.randn((rows, cols), generator=gen).to("cuda")
    address = target.data_ptr()
    w = torch.classes.ferry.StagedWrite(target)
    check("tensor() is the caller's tensor",
          w.tensor().data_ptr() == address and w.tensor().shape == target.shape)
    expected = target.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # `target` and `expected` were made on the default stream
    with torch.cuda.stream(side):
        for step in range(3):
            staged = 0  # empty writes are checked but not recorded
            for _ in range(500):
                row = int(torch.randint(0, rows, (1,), generator=gen))
                start = int(torch.randint(0, cols, (1,), generator=gen))
                length = int(torch.randint(0, cols - start + 1, (1,), generator=gen))
                values = random(length, torch.float32)
                w.stage_write(row, start, values)
                staged += length > 0
                expected[row, start:start + length] = values.to("cuda")
            check(f"step {step}: pending", w.pending() == staged)
            w.apply_write()
            side.synchronize()
            check(f"step {step}: the caller's tensor matches torch's slice assignments",
                  target.data_ptr() == address and torch.equal(target, expected))
            check(f"step {step}: torch reads the written tensor",
                  torch.equal((target * 2).sum(1), (expected * 2).sum(1)))
    raises("a write past the end of a row", lambda: w.stage_write(0, cols - 2, random(3, torch.float32)),
           "stage_write out of bounds")
    check("a failed stage_write records nothing", w.pending() == 0)
    w.stage_write(1, 3, random(5, torch.float32))
    del w  # applies nothing; the caller's tensor stays as it was
    torch.cuda.synchronize()
    check("the caller's tensor outlives the extension object", torch.equal(target, expected))

    # The object holds its tensor: one nobody else holds is still written and read through tensor().
    w = torch.classes.ferry.StagedWrite(torch.randn((4, 9), generator=gen).to("cuda"))
    expected = w.tensor().clone()
    values = random(6, torch.float32)
    w.stage_write(2, 3, values)
    w.apply_write()
    expected[2, 3:9] = values.to("cuda")
    torch.cuda.synchronize()
    check("a tensor held only by the object takes the writes", torch.equal(w.tensor(), expected))
    del w

    # The target's checks: from_torch's (dtype, layout, device type) and StagedWrite's own.
    raises("a float64 target", lambda: torch.classes.ferry.StagedWrite(torch.zeros(4, 4, dtype=torch.float64, device="cuda")),
           "dtype mismatch")
    raises("a non-contiguous target", lambda: torch.classes.ferry.StagedWrite(torch.zeros(8, 16, device="cuda")[:, ::2]),
           "not row-major contiguous")
    raises("a CPU target", lambda: torch.classes.ferry.StagedWrite(torch.zeros(4, 4)), "the target must be a CUDA tensor")
    raises("a pinned CPU target", lambda: torch.classes.ferry.StagedWrite(torch.zeros(4, 4).pin_memory()),
           "the target must be a CUDA tensor")
    for shape in ((16,), (2, 2, 4)):
        raises(f"a {len(shape)}-D target", lambda: torch.classes.ferry.StagedWrite(torch.zeros(shape, device="cuda")),
               "the target must be a 2-D tensor")

    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
