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

    # StagedWrite: random writes (later ones win), applied with one launch on torch's current
    # stream (a side stream here), against torch's own indexing.
    rows, cols = 300, 257
    w = torch.classes.ferry.StagedWrite(rows, cols)
    view = w.tensor()
    expected = torch.zeros(rows, cols, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # `expected` was zeroed on the default stream
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
            check(f"step {step}: staged writes match torch", torch.equal(view, expected))
            check(f"step {step}: torch reads the ferry target",
                  torch.equal((view * 2).sum(1), (expected * 2).sum(1)))
    raises("a write past the end of a row", lambda: w.stage_write(0, cols - 2, random(3, torch.float32)),
           "stage_write out of bounds")
    check("a failed stage_write records nothing", w.pending() == 0)
    del w  # the view keeps the ferry target alive
    torch.cuda.synchronize()
    check("the view outlives the extension object", torch.equal(view, expected))
    del view  # the ferry target goes with its last view, here rather than at interpreter exit
    torch.cuda.synchronize()

    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
