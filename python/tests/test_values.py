# Values from Python: every entry point converts a source element only when the target dtype holds
# it exactly (float32: a float rounded to nearest, refused beyond float32's range), whatever the
# source — a Python list, tuple or generator of ints, floats or bools, NumPy arrays of every
# numeric dtype (byte-swapped, strided, 2-D, object), torch tensors of every numeric dtype
# (non-contiguous too), NumPy scalars and one-element tensors inside a list — else a `ferry:`
# ValueError (TypeError for what is not a number) naming the value and its position, with nothing
# staged. Checked for each source kind × target dtype against a reference written here in Python
# integers, on the host backend (device="cpu"), which every build holds.
import math

import numpy as np
import pytest
import torch

import ferry_vllm as fv

TARGETS = {torch.int32: (-(2**31), 2**31 - 1), torch.int64: (-(2**63), 2**63 - 1), torch.float32: None}
DEVICE = "cpu"

INTS = [0, 1, -1, 5, 127, -128, 255, 2**15 - 1, 2**16 - 1, 2**24, 2**24 + 1, 2**31 - 1, 2**31, -(2**31),
        -(2**31) - 1, 2**32 - 1, 2**40 + 5, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1]
FLOATS = [0.5, 2.7, -2.0, 7.0, 2.0**31, -(2.0**31), 2.0**63, 16777217.0, 3.4028235e38, 1e39, 1e300, -0.0,
          math.nan, math.inf, -math.inf]


# ---- the reference ----------------------------------------------------------------------------------


def reference(value, target):
    """(True, element) when `target` holds `value` exactly, else (False, a word of the reason)."""
    if isinstance(value, bool):
        value = int(value)
    if target is torch.float32:
        if isinstance(value, int):
            f = np.float32(value) if abs(value) < 2**64 else np.float32(np.inf)
            return (True, float(f)) if math.isfinite(f) and int(f) == value else (False, "does not hold exactly")
        with np.errstate(over="ignore"):
            f = np.float32(value)
        if math.isinf(f) and math.isfinite(value):
            return False, "beyond float32's range"
        return True, float(f)
    lo, hi = TARGETS[target]
    if isinstance(value, float):
        if not math.isfinite(value):
            return False, "is not finite"
        if value != math.floor(value):
            return False, "is not an integer"
        value = int(value)
    return (True, value) if lo <= value <= hi else (False, "out of")


# ---- sources ------------------------------------------------------------------------------------------

NUMPY = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
         "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
         "float16": np.float16, "float32": np.float32, "float64": np.float64, ">i4": np.dtype(">i4"),
         ">f8": np.dtype(">f8")}
TORCH = {"bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
         "int64": torch.int64, "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
         "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def held(value, dtype):
    """`value` as a NumPy or torch dtype holds it (a Python number), or None when it does not."""
    if isinstance(dtype, torch.dtype):
        if dtype is torch.bool:
            return value if isinstance(value, bool) else None
        if isinstance(value, bool):
            return None
        if dtype.is_floating_point:
            with np.errstate(over="ignore"):
                got = torch.tensor([float(value)], dtype=torch.float64).to(dtype).item()
            return got if (math.isnan(value) or math.isinf(value) or math.isfinite(got)) else None
        info = torch.iinfo(dtype)
        return value if isinstance(value, int) and info.min <= value <= info.max else None
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            got = float(np.array([value], dtype=np.float64).astype(dtype)[0])
        return got if (math.isnan(value) or math.isinf(value) or math.isfinite(got)) else None
    info = np.iinfo(dtype)
    return value if isinstance(value, int) and info.min <= value <= info.max else None


def candidates(kind):
    """The values a source kind can carry, each as the source holds it."""
    family, _, name = kind.partition(":")
    pool = INTS + FLOATS + [True, False]
    if family == "py":
        return {"ints": INTS, "floats": FLOATS, "bools": [True, False, True]}[name]
    dtype = NUMPY.get(name) if family == "numpy" else TORCH.get(name)
    if family in ("numpy-strided", "numpy-2d", "numpy-object"):
        dtype = np.int64 if family != "numpy-object" else None
    if family in ("torch-strided",):
        dtype = torch.int64
    if family == "torch-float8":
        return [0.5, 2.0, -3.0, 448.0, 1.5]
    if dtype is None:
        return INTS + FLOATS
    out = []
    for v in pool:
        h = held(v, dtype)
        if h is not None and all(not (type(h) is type(o) and h == o) for o in out):
            out.append(h)
    return out


def make(kind, values):
    """A source of `kind` holding `values` (the source's own numbers)."""
    family, _, name = kind.partition(":")
    if family == "py":
        return list(values)
    if family == "py-tuple":
        return tuple(values)
    if family == "py-generator":
        return (v for v in values)
    if family == "numpy":
        return np.array(values, dtype=NUMPY[name])
    if family == "numpy-strided":
        spread = np.zeros(2 * len(values), dtype=np.int64)
        spread[::2] = values
        return spread[::2]
    if family == "numpy-2d":
        return np.array(values, dtype=np.int64).reshape(-1, 1) if values else np.zeros((0, 1), dtype=np.int64)
    if family == "numpy-object":
        return np.array(values, dtype=object)
    if family == "numpy-scalars":
        return [np.float32(v) if isinstance(v, float) else np.int64(v) for v in values]
    if family == "tensor-scalars":
        return [torch.tensor(v, dtype=torch.float64 if isinstance(v, float) else torch.int64) for v in values]
    if family == "torch":
        if TORCH[name] is torch.bfloat16:
            return torch.tensor(values, dtype=torch.float64).to(torch.bfloat16)
        return torch.tensor(values, dtype=TORCH[name])
    if family == "torch-strided":
        spread = torch.zeros(2 * len(values), dtype=torch.int64)
        spread[::2] = torch.tensor(values, dtype=torch.int64)
        return spread[::2]
    if family == "torch-float8":
        return torch.tensor(values, dtype=torch.float32).to(torch.float8_e4m3fn)
    raise AssertionError(kind)


KINDS = (["py:ints", "py:floats", "py:bools", "numpy-strided:", "numpy-2d:", "numpy-object:"]
         + [f"numpy:{n}" for n in NUMPY] + [f"torch:{n}" for n in TORCH]
         + ["torch-strided:", "torch-float8:"])
# numpy-scalars and tensor-scalars hold Python-made numbers of their own types.
SCALAR_KINDS = ["numpy-scalars:", "tensor-scalars:"]
INT_VALUES_ONLY = {"numpy-strided:", "numpy-2d:", "torch-strided:"}


def source_values(kind):
    if kind in SCALAR_KINDS:
        vals = [0, 5, 2**40 + 5, -(2**31) - 1, 2.5, 7.0, 1e39]
        # NumPy float32 scalars hold float32 values; tensor scalars float64
        with np.errstate(over="ignore"):
            return [float(np.float32(v)) if isinstance(v, float) and kind == "numpy-scalars:" else v for v in vals]
    return candidates(kind)


# ---- entry points ----------------------------------------------------------------------------------
# Each writes `src` (n elements) into a fresh target of `dtype` and returns what landed (a CPU
# tensor of n elements), or raises; `unchanged()` after a raise checks that nothing was staged.


class StageWrite:
    def __init__(self, dtype, n):
        self.t = fv.StagedWriteTensor((1, max(n, 1)), dtype, DEVICE)
        self.n = n

    def write(self, src):
        self.t.stage_write(0, 0, src)
        self.t.apply_write()
        return self.t.gpu[0, : self.n]

    def unchanged(self):
        assert self.t.num_staged_writes == 0
        self.t.apply_write()
        assert torch.count_nonzero(self.t.gpu).item() == 0


class CopyToUva:
    def __init__(self, dtype, n):
        self.pool = fv.UvaBufferPool(max(n, 1), dtype, max_concurrency=2, device=DEVICE)
        self.before = [b.cpu.clone() for b in self.pool._uva_bufs]
        self.curr = self.pool._curr

    def write(self, src):
        return self.pool.copy_to_uva(src)

    def unchanged(self):
        assert self.pool._curr == self.curr
        for b, old in zip(self.pool._uva_bufs, self.before):
            assert torch.equal(b.cpu, old)


class CopyToGpu:
    def __init__(self, dtype, n):
        self.pool = fv.UvaBufferPool(max(n, 1), dtype, max_concurrency=2, device=DEVICE)
        self.out = torch.full((n,), 3, dtype=dtype)

    def write(self, src):
        return self.pool.copy_to_gpu(src, out=self.out)

    def unchanged(self):
        assert torch.all(self.out == 3)


class H2D:
    def __init__(self, dtype, n):
        self.dtype = dtype

    def write(self, src):
        return fv.async_tensor_h2d(src, DEVICE, self.dtype)

    def unchanged(self):
        pass


class StepUpload:
    def __init__(self, dtype, n):
        self.sb = fv.StepBatch(device=DEVICE)
        self.dst = torch.full((max(n, 1),), 3, dtype=dtype)
        self.sb.add_upload(self.dst)
        self.n = n

    def write(self, src):
        self.sb.step([src], [])
        return self.dst[: self.n]

    def unchanged(self):
        assert self.sb.steps == 0 and torch.all(self.dst == 3)


class StepWrite:
    def __init__(self, dtype, n):
        self.sb = fv.StepBatch(device=DEVICE)
        self.target = torch.full((1, max(n, 1)), 3, dtype=dtype)
        self.sb.add_writes(self.target, 1, max(n, 1))
        self.n = n

    def write(self, src):
        self.sb.step([], [(0, 0, 0, src)])
        return self.target[0, : self.n]

    def unchanged(self):
        assert self.sb.steps == 0 and torch.all(self.target == 3)


ENTRIES = {"stage_write": StageWrite, "copy_to_uva": CopyToUva, "copy_to_gpu": CopyToGpu,
           "async_tensor_h2d": H2D, "StepBatch upload": StepUpload, "StepBatch write": StepWrite}


def element_text(v):
    """How a message names a Python-made value."""
    return repr(v) if not isinstance(v, bool) else str(v)


def check(entry, kind, target, values):
    """Writes `values` (as `kind` holds them) through `entry`: equal to the reference where every
    value converts, else the first refused value's error, with nothing staged."""
    outcomes = [reference(v, target) for v in values]
    bad = next((i for i, (ok, _) in enumerate(outcomes) if not ok), None)
    e = ENTRIES[entry](target, len(values))
    src = make(kind, values)
    if bad is None:
        got = e.write(src)
        want = torch.tensor([x for _, x in outcomes], dtype=target)
        assert got.shape == (len(values),)
        assert torch.equal(got.cpu(), want) or (target is torch.float32 and torch.allclose(
            got.cpu(), want, rtol=0, atol=0, equal_nan=True)), (got, want)
        return
    position = f"at position {bad}"
    with pytest.raises(ValueError, match=r"^ferry: ") as info:
        e.write(src)
    message = str(info.value)
    assert position in message and outcomes[bad][1] in message, (message, values[bad], outcomes[bad])
    if kind.startswith("py:") and not math.isnan(values[bad]):
        assert f"value {element_text(values[bad])} " in message, message
    e.unchanged()


@pytest.mark.parametrize("target", list(TARGETS), ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("kind", KINDS + SCALAR_KINDS)
def test_stage_write_and_copy_to_uva_every_source(kind, target):
    """The issue's two entry points, every source kind × target dtype: all the values the source
    holds that convert, together; then each value that does not, after two that do."""
    values = source_values(kind)
    good = [v for v in values if reference(v, target)[0]]
    bad = [v for v in values if not reference(v, target)[0]]
    for entry in ("stage_write", "copy_to_uva"):
        check(entry, kind, target, good)
        for v in bad:
            check(entry, kind, target, good[:2] + [v])


@pytest.mark.parametrize("target", list(TARGETS), ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("kind", ["py:ints", "py:floats", "numpy:int64", "numpy:float64", "numpy:uint64",
                                  "torch:int64", "torch:float32", "torch:float64", "numpy-scalars:"])
@pytest.mark.parametrize("entry", ["copy_to_gpu", "async_tensor_h2d", "StepBatch upload", "StepBatch write"])
def test_the_other_entry_points(entry, kind, target):
    values = source_values(kind)
    good = [v for v in values if reference(v, target)[0]]
    check(entry, kind, target, good)
    for v in [v for v in values if not reference(v, target)[0]]:
        check(entry, kind, target, good[:2] + [v])


def test_the_issues_reproductions():
    # StagedWriteTensor(int32).stage_write(0, 0, torch.tensor([2**40 + 5])) stored 5; [2.7] stored
    # 2; UvaBufferPool(int32).copy_to_uva(torch.tensor([2**40 + 3])) held 3.
    t = fv.StagedWriteTensor((1, 4), torch.int32, DEVICE)
    with pytest.raises(ValueError, match=r"ferry: stage_write: value 1099511627781 at position 0 is out of int32's range"):
        t.stage_write(0, 0, torch.tensor([2**40 + 5]))
    with pytest.raises(ValueError, match=r"ferry: stage_write: value 2.7 at position 0 is not an integer"):
        t.stage_write(0, 0, torch.tensor([2.7]))
    assert t.num_staged_writes == 0
    pool = fv.UvaBufferPool(4, torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=r"ferry: copy_to_uva: value 1099511627779 at position 0 is out of int32's range"):
        pool.copy_to_uva(torch.tensor([2**40 + 3]))
    assert pool._curr == 0 and all(torch.count_nonzero(b.cpu).item() == 0 for b in pool._uva_bufs)
    # Integral floats convert (the value is what counts, not its type), as do bools.
    t.stage_write(0, 0, [2.0, True, np.float32(-3.0), torch.tensor(4.0)])
    t.apply_write()
    assert t.gpu.tolist() == [[2, 1, -3, 4]]


@pytest.mark.parametrize("target", list(TARGETS), ids=lambda d: str(d).split(".")[-1])
def test_scalars_stage_write_elem(target):
    t = fv.StagedWriteTensor((1, 1), target, DEVICE)
    for v in INTS + FLOATS + [True, np.int16(-7), np.float16(2.5), np.bool_(True), torch.tensor(9),
                              torch.tensor([2.0], dtype=torch.bfloat16)]:
        number = v.item() if hasattr(v, "item") else v
        ok, want = reference(number, target)
        if ok:
            t.stage_write_elem(0, v)
            t.apply_write()
            got = t.gpu[0, 0].item()
            assert got == want or (math.isnan(got) and math.isnan(want)), (v, got, want)
        else:
            with pytest.raises(ValueError, match=r"^ferry: stage_write_elem: value .* " + want):
                t.stage_write_elem(0, v)
            assert t.num_staged_writes == 0


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (["a"], TypeError, r"ferry: stage_write: value 'a' at position 0 is a str, not a number"),
        ([1, None], TypeError, r"value None at position 1 is a NoneType, not a number"),
        ([1, 2, 1 + 2j], TypeError, r"value \(1\+2j\) at position 2 is a complex"),
        ("abc", TypeError, r"the values must be numbers, got the str 'abc'"),
        (5, TypeError, r"the values must be a sequence or an iterable of numbers, got 5 \(int\)"),
        (np.int64(5), TypeError, r"the values must be a sequence, got a 0-d"),
        (torch.tensor(5), TypeError, r"the values must be a sequence, got a 0-d tensor"),
        (np.array([1 + 1j]), TypeError, r"buffer format 'Zd'"),
        (torch.tensor([1 + 1j]), TypeError, r"of dtype ComplexFloat does not hold numbers"),
        (np.array(["x"]), TypeError, r"buffer format"),
        ([torch.tensor([1, 2])], TypeError, r"value at position 0 is a tensor of 2 elements, not a number"),
        ([2**70], ValueError, r"value 1180591620717411303424 at position 0 is out of int32's range"),
        ([-(2**70)], ValueError, r"value -1180591620717411303424 at position 0 is out of int32's range"),
    ],
)
def test_what_is_not_a_number(bad, error, match):
    t = fv.StagedWriteTensor((1, 4), torch.int32, DEVICE)
    with pytest.raises(error, match=match):
        t.stage_write(0, 0, bad)
    assert t.num_staged_writes == 0


def test_arguments_that_are_not_ints():
    t = fv.StagedWriteTensor((2, 4), torch.int32, DEVICE)
    with pytest.raises(TypeError, match=r"ferry: stage_write: index must be an int, got 'a' \(str\)"):
        t.stage_write("a", 0, [1])
    with pytest.raises(TypeError, match=r"ferry: stage_write: start must be an int, got 1.0 \(float\)"):
        t.stage_write(0, 1.0, [1])
    with pytest.raises(TypeError, match=r"ferry: stage_write_elem: index must be an int"):
        t.stage_write_elem(None, 1)
    t.stage_write(index=np.int64(1), start=torch.tensor(2), x=[7])  # vLLM's keyword names; __index__
    t.stage_write_elem(index=0, x=5)
    t.apply_write()
    assert t.gpu.tolist() == [[5, 0, 0, 0], [0, 0, 7, 0]]


def test_big_endian_strided_2d_sources_land_in_c_order():
    t = fv.StagedWriteTensor((1, 6), torch.int64, DEVICE)
    src = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]  # 3 x 2, byte-swapped, strided
    t.stage_write(0, 0, src)
    t.apply_write()
    assert t.gpu.tolist() == [[0, 2, 4, 6, 8, 10]]
    bad = src.astype(np.float64)
    bad[2, 1] = 0.25
    with pytest.raises(ValueError, match=r"value 0.25 at position 5 \(index \[2, 1\]\) is not an integer"):
        t.stage_write(0, 0, bad)
