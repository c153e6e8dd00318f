#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/seed-*): each seed is a
named scenario encoded in the byte format that fuzz_input.hpp decodes, field by field in the
order the target reads them (FERRY_FUZZ_TRACE=1 prints what a seed decodes to). Run it after
changing what a target decodes; files named regression-* are crash inputs and are kept.

    tests/fuzz/make_corpus.py            # rewrites every corpus/<target>/seed-*
"""
import math
import os
import pathlib
import struct

MAX64 = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1


def edge_value(b):
    k = b % 64
    p = 1 << k
    return [p - 1, p, p + 1, MAX64 - (k % 4)][(b // 64) % 4] & MAX64


EDGE = {}
for _b in range(256):
    EDGE.setdefault(edge_value(_b), _b)


class Enc:
    """The inverse of ferry_fuzz::input: each method writes what the same-named read consumes."""

    def __init__(self):
        self.b = bytearray()

    def byte(self, v):
        self.b.append(v & 0xFF)

    def raw(self, v, n=8):
        self.b += (v % (1 << (8 * n))).to_bytes(n, "little")

    def flag(self, v):
        self.byte(1 if v else 0)

    def below(self, v, n):
        if n <= 1:
            assert v == 0
            return
        assert 0 <= v < n, (v, n)
        self.raw(v, ((n - 1).bit_length() + 7) // 8)

    def between(self, v, lo, hi):
        self.below(v - lo, hi - lo + 1)

    def edge(self, v):
        self.byte(EDGE[v & MAX64])

    def count(self, v, inside, beyond):
        """A step's count: below `inside` (one byte in eight says so), else a size past it."""
        if v < inside:
            self.below(1, 8)
            self.below(v, inside)
        else:
            self.below(0, 8)
            self.size(v, beyond)

    def size(self, v, small):
        v &= MAX64
        if v < small:
            self.byte(0)
            self.below(v, small)
        elif v in EDGE:
            self.byte(200)
            self.edge(v)
        else:
            self.byte(250)
            self.raw(v)


# ---- dlpack ---------------------------------------------------------------------------------
DL_TYPES = {"int8": (0, 1), "uint16": (1, 2), "int32": (2, 4), "float": (3, 4), "double": (4, 8),
            "uint64": (5, 8)}
KDLCPU, KDLCUDA, KDLCUDAHOST = 1, 2, 3


def dl_extent(e, v):
    v &= MAX64
    if 0 <= v < 9:
        e.byte(0)
        e.below(v, 9)
    elif v in EDGE:
        e.byte(200)
        e.edge(v)
    else:
        e.byte(240)
        e.raw(v)


def dl_from(e, t, buf=256, data="buf", off=0, byte_offset=0, bo_mode="small", dtype=None, device=None,
            ndim=None, shape=(), shape_null=False, strides="null", change=None, api=0, devarg=0):
    """One from_dlpack case: `data` is "buf" (buffer + off), "null" or an address."""
    idx, _ = DL_TYPES[t]
    e.byte(idx << 1)  # even: from_case
    e.below(buf, 1025)
    if data == "buf":
        e.below(0, 5)
        e.below(off, buf + 1)
    elif data == "null":
        e.below(3, 5)
    else:
        e.below(4, 5)
        e.raw(data)
    if bo_mode == "small":
        e.below(0, 4)
        e.size(byte_offset, buf + 16)
    elif bo_mode == "before":  # 0 - n
        e.below(2, 4)
        e.below(byte_offset, 4096)
    else:
        e.below(3, 4)
        e.raw(byte_offset)
    if dtype is None:
        e.below(1, 8)
    else:
        e.below(0, 8)
        e.byte(dtype[0])
        e.byte(dtype[1])
        e.raw(dtype[2], 2)
    if device is None:
        e.below(1, 8)
    else:
        e.below(0, 8)
        e.below(device[0], 16)
        if -1 <= device[1] <= 2:
            e.flag(True)
            e.between(device[1] + 1, 0, 3)
        else:
            e.flag(False)
            e.raw(device[1], 4)
    n = len(shape) if ndim is None else ndim
    if n >= 0:
        e.below(n if n < 7 else 0, 7)
        e.below(1, 16)
    else:
        e.below(0, 7)
        e.below(0, 16)
        if n == -1:
            e.flag(True)
        else:
            e.flag(False)
            e.below(n + (1 << 31), 4)
    for v in shape:
        dl_extent(e, v)
    if n > 0:
        e.below(0 if shape_null else 1, 16)
    if strides == "null":
        e.below(0, 4)
    elif strides == "compact":
        e.below(1, 4)
        if n > 0:
            if change is None:
                e.flag(False)
            else:
                e.flag(True)
                e.below(change[0], n)
                dl_extent(e, change[1])
    else:
        e.below(3, 4)
        for v in strides:
            dl_extent(e, v)
    e.below(api, 4)
    if devarg == 0:
        e.below(1, 4)
    else:
        e.below(0, 4)
        e.between(devarg + 1, 0, 3)


def dl_to(e, t, n=16, shape=(), complete=False, with_device=False, devarg=0, wild=None):
    idx, _ = DL_TYPES[t]
    e.byte((idx << 1) | 1)  # odd: to_case
    if wild is None:
        e.below(1, 4)
        e.below(n, 65)
    else:
        e.below(0, 4)
        e.size(n, 1 << 16)
        e.raw(wild, 6)
    e.below(len(shape), 6)
    for v in shape:
        dl_extent(e, v)
    if shape:
        e.flag(complete)
    e.flag(with_device)
    if devarg == 0:
        e.below(1, 4)
    else:
        e.below(0, 4)
        e.between(devarg + 1, 0, 3)


def dlpack_seeds():
    s = {}

    def one(name, f):
        e = Enc()
        f(e)
        s[name] = bytes(e.b)

    for t in DL_TYPES:
        one(f"from-1d-{t}", lambda e, t=t: dl_from(e, t, shape=[8]))
        one(f"to-flat-{t}", lambda e, t=t: dl_to(e, t, n=12))
    for api in range(4):
        one(f"from-2d-compact-strides-api{api}",
            lambda e, api=api: dl_from(e, "int32", shape=[4, 8], strides="compact", api=api))
    one("from-3d-extent1-any-stride", lambda e: dl_from(e, "float", shape=[2, 1, 8], strides="compact", change=(1, 77)))
    one("from-2d-transposed-strides", lambda e: dl_from(e, "float", shape=[4, 8], strides=[1, 4]))
    one("from-byte-offset-in-buffer", lambda e: dl_from(e, "int32", off=16, byte_offset=32, shape=[8]))
    one("from-misaligned", lambda e: dl_from(e, "double", off=4, shape=[2]))
    one("from-null-data-empty", lambda e: dl_from(e, "int32", data="null", shape=[0, 5]))
    one("from-null-data-nonempty", lambda e: dl_from(e, "int32", data="null", shape=[3]))
    one("from-scalar-ndim0", lambda e: dl_from(e, "uint64", ndim=0))
    one("from-negative-extent", lambda e: dl_from(e, "int8", shape=[4, MAX64]))
    one("from-extents-overflow", lambda e: dl_from(e, "int8", shape=[1 << 32, 1 << 32]))
    one("from-empty-zero-after-huge", lambda e: dl_from(e, "int8", shape=[1 << 62, 3, 0]))
    one("from-ndim-negative", lambda e: dl_from(e, "int32", ndim=-1))
    one("from-shape-null", lambda e: dl_from(e, "int32", shape=[4], shape_null=True))
    one("from-dtype-lanes2", lambda e: dl_from(e, "float", shape=[4], dtype=(2, 32, 2)))
    one("from-dtype-bits-mismatch", lambda e: dl_from(e, "int32", shape=[4], dtype=(0, 16, 1)))
    one("from-device-cuda", lambda e: dl_from(e, "int32", shape=[4], device=(KDLCUDA, 0)))
    one("from-device-cudahost-host-api", lambda e: dl_from(e, "int32", shape=[4], device=(KDLCUDAHOST, 5), api=3))
    one("from-device-id1", lambda e: dl_from(e, "int32", shape=[4], device=(KDLCPU, 1)))
    one("from-device-arg-1", lambda e: dl_from(e, "int32", shape=[4], devarg=1))
    one("from-wild-address-end-wraps", lambda e: dl_from(e, "int8", data=MAX64 - 15, shape=[64]))
    one("to-2d", lambda e: dl_to(e, "int32", n=12, shape=[3, 4]))
    one("to-3d-completed", lambda e: dl_to(e, "double", n=24, shape=[2, 3, 5], complete=True))
    one("to-shape-mismatch", lambda e: dl_to(e, "int32", n=12, shape=[5, 3]))
    one("to-negative-extent", lambda e: dl_to(e, "int32", n=12, shape=[MAX64, MAX64 - 11]))
    one("to-empty-shape-with-zero", lambda e: dl_to(e, "float", n=0, shape=[0, 7]))
    one("to-device-1", lambda e: dl_to(e, "int32", n=4, with_device=True, devarg=1))
    one("to-huge-wild-span", lambda e: dl_to(e, "int8", n=1 << 62, shape=[1 << 31, 1 << 31], wild=1 << 20))
    return s


# ---- staged_write_tensor ----------------------------------------------------------------------
class StagedSeed:
    """A staged_fuzz input: a tensor, then operations (see run_staged)."""

    TYPES = {"uint8": 0, "int32": 1, "uint64": 2}

    def __init__(self, t="int32", fixed=False, rows=4, cols=16, adopt=False, slots=2, growth=None, prefix=None):
        self.e = Enc()
        if prefix is not None:
            prefix(self.e)
        else:
            self.e.byte((self.TYPES[t] << 1) | (1 if fixed else 0))
        self.e.raw(0x1234, 2)
        self.e.size(rows, 17)
        self.e.size(cols, 65)
        self.e.flag(adopt)
        self.e.below(slots - 1, 3)
        self.rows, self.cols = rows, cols

    def write(self, row, start, length, contiguous=True):
        e, rows, cols = self.e, self.rows, self.cols
        e.below(0, 10)
        if row < rows:
            e.below(1, 8)
            e.below(row, rows)
        else:
            e.below(0, 8)
            e.size(row, rows + 2)
        if start <= cols:
            e.below(1, 8)
            e.below(start, cols + 1)
        else:
            e.below(0, 8)
            e.size(start, cols + 2)
        room = cols - min(start, cols)
        if length <= room:
            e.below(1, 8)
            e.below(length, room + 1)
        else:
            e.below(0, 8)
            e.size(length, cols + 2)
        e.flag(contiguous)
        return self

    def elem(self, row):
        e = self.e
        e.below(4, 10)
        if row < self.rows:
            e.below(1, 8)
            e.below(row, self.rows)
        else:
            e.below(0, 8)
            e.size(row, self.rows + 2)
        return self

    def clear(self):
        self.e.below(5, 10)
        return self

    def reserve(self, writes, elements):
        self.e.below(6, 10)
        self.e.size(writes, 64)
        self.e.size(elements, 64)
        return self

    def apply(self, check=True):
        self.e.below(7, 10)
        self.e.flag(check)
        return self

    def sync(self):
        self.e.below(9, 10)
        return self

    def bytes(self):
        return bytes(self.e.b)


def staged_seeds():
    s = {}
    for t in StagedSeed.TYPES:
        for fixed in (False, True):
            g = "fixed" if fixed else "pow2"
            seed = StagedSeed(t, fixed)
            if fixed:
                seed.reserve(8, 64)
            s[f"writes-apply-{t}-{g}"] = seed.write(0, 0, 16).write(1, 3, 5, False).write(3, 15, 1).apply().bytes()
    s["later-write-wins"] = StagedSeed().write(2, 0, 10).write(2, 4, 4).write(2, 2, 3, False).apply().bytes()
    s["overlap-across-rows"] = StagedSeed(rows=3, cols=8).write(0, 0, 8).write(1, 0, 8).write(0, 4, 4).write(1, 2, 2).apply().bytes()
    s["many-applies"] = StagedSeed(slots=1).write(0, 0, 4).apply(False).write(0, 2, 4).apply(False).write(1, 1, 1).apply().bytes()
    s["adopted-target-kept"] = StagedSeed(adopt=True).write(1, 4, 4).apply().sync().bytes()
    s["out-of-bounds-row"] = StagedSeed().write(1, 0, 4).write(4, 0, 1).write(MAX64, 0, 1).apply().bytes()
    s["out-of-bounds-start"] = StagedSeed().write(0, 17, 0).write(0, MAX64, 1).write(0, 2, 2).apply().bytes()
    s["out-of-bounds-length-huge"] = StagedSeed().write(0, 4, 13).write(0, 1, MAX64).write(0, 0, 1 << 63).apply().bytes()
    s["empty-writes"] = StagedSeed().write(0, 16, 0).write(3, 0, 0).apply().bytes()
    s["elem-writes"] = StagedSeed().elem(0).elem(3).elem(4).elem(0).apply().bytes()
    s["clear-drops"] = StagedSeed().write(0, 0, 8).clear().write(1, 0, 2).apply().bytes()
    s["reserve-then-writes"] = StagedSeed().reserve(4, 32).write(0, 0, 16).write(1, 0, 16).apply().bytes()
    s["reserve-unrepresentable"] = StagedSeed().write(0, 0, 2).reserve(MAX64, 1).reserve(1, MAX64).apply().bytes()
    s["fixed-beyond-reserve"] = StagedSeed(fixed=True).reserve(2, 8).write(0, 0, 4).write(1, 0, 4).write(2, 0, 1).apply().bytes()
    s["fixed-without-reserve"] = StagedSeed(fixed=True).write(0, 0, 4).apply().bytes()
    s["zero-rows"] = StagedSeed(rows=0, cols=8).write(0, 0, 1).apply().bytes()
    s["zero-cols"] = StagedSeed(rows=4, cols=0).write(1, 0, 0).elem(1).apply().bytes()
    s["size-overflows"] = StagedSeed(rows=1 << 40, cols=1 << 40).bytes()
    s["size-overflows-adopted"] = StagedSeed(rows=1 << 62, cols=8, adopt=True).bytes()
    s["long-row-chunks"] = StagedSeed("uint8", rows=2, cols=64).write(0, 0, 64).write(1, 1, 63, False).apply().bytes()
    return s


# ---- step_batch -------------------------------------------------------------------------------
class StepSeed:
    """A step_fuzz input (see step_run): a plan of uint32 entries (type index 1) unless given."""

    def __init__(self, fixed=False, slots=2, max_slots=4, prefix=None):
        self.e = Enc()
        if prefix is not None:
            prefix(self.e)
        else:
            self.e.flag(fixed)
        self.e.raw(0x4321, 2)
        self.e.below(slots - 2, 3)
        self.e.below(max_slots - slots, 4)
        self.e.below(1, 16)
        self.entries = []
        self.uploads, self.publishes, self.writes, self.fills = {}, {}, {}, {}
        self.frozen = self.open = False
        self.synced = True

    @staticmethod
    def bad_counts(slots, max_slots, fixed=False):
        e = Enc()
        e.flag(fixed)
        e.raw(0, 2)
        e.below(0, 3)
        e.below(0, 4)
        e.below(0, 16)
        e.below(slots, 3)
        e.below(max_slots, 3)
        return bytes(e.b)

    # The plan: entries are written by plan(); each is (kind, type, args).
    def upload(self, length, max_n, ty=1):
        self.entries.append(("upload", ty, (length, max_n)))
        return self

    def publish(self, max_n, ty=1):
        self.entries.append(("publish", ty, (max_n,)))
        return self

    def target(self, rows, cols, max_writes, max_elements, ty=1):
        self.entries.append(("writes", ty, (rows, cols, max_writes, max_elements)))
        return self

    def fill(self, length, publish=None, index=0, ty=1):
        self.entries.append(("fill", ty, (length, publish, index)))
        return self

    def plan(self):
        e = self.e
        e.below(len(self.entries), 9)
        for kind, ty, args in self.entries:
            e.below(["upload", "publish", "writes", "fill"].index(kind), 4)
            e.below(ty, 3)
            self._add(kind, ty, args)
        return self

    def _add(self, kind, ty, args):
        e = self.e
        if kind == "upload":
            length, max_n = args
            e.below(length, 65)
            if max_n <= length:
                e.below(1, 8)
                e.below(max_n, length + 1)
            else:
                e.below(0, 8)
                e.size(length, length + 1)  # decoded as size + 1 + below(4)
                raise ValueError("use max_n <= length")
            self.uploads.setdefault(ty, []).append(length)
        elif kind == "publish":
            (max_n,) = args
            e.size(max_n, 33)
            self.publishes.setdefault(ty, []).append(max_n)
        elif kind == "writes":
            rows, cols, mw, me = args
            e.below(rows, 9)
            e.below(cols, 33)
            e.size(mw, 9)
            e.size(me, 65)
            self.writes.setdefault(ty, []).append((rows, cols))
        else:
            length, publish, index = args
            e.below(length, 33)
            pubs = self.publishes.get(ty, [])
            if pubs:
                e.flag(publish is not None)
                if publish is not None:
                    e.below(publish, len(pubs))
                    e.below(index, pubs[publish] + 2)
            self.fills.setdefault(ty, []).append(length)

    # The steps.
    def begin(self):
        self.e.below(0, 14)
        return self

    def span_upload(self, i, n, ty=1):
        e = self.e
        e.below(1, 14)
        e.below(ty, 3)
        ups = self.uploads.get(ty, [])
        e.below(i, len(ups))
        e.count(n, ups[i] + 1, ups[i] + 2)
        return self

    def span_publish(self, i, n, ty=1):
        e = self.e
        e.below(3, 14)
        e.below(ty, 3)
        pubs = self.publishes.get(ty, [])
        e.below(i, len(pubs))
        e.count(n, min(pubs[i], 64) + 2, pubs[i] + 2)
        return self

    def stage(self, i, row, start, length, elem=False, contiguous=True, ty=1):
        e = self.e
        e.below(4, 14)
        e.below(ty, 3)
        rows, cols = self.writes[ty][i]
        e.below(i, len(self.writes[ty]))
        e.below(0 if elem else 1, 4)
        if row < rows:
            e.below(1, 8)
            e.below(row, rows)
        else:
            e.below(0, 8)
            e.size(row, rows + 2)
        if start <= cols:
            e.below(1, 8)
            e.below(start, cols + 1)
        else:
            e.below(0, 8)
            e.size(start, cols + 2)
        room = cols - min(start, cols)
        if length <= room:
            e.below(1, 8)
            e.below(length, room + 1)
        else:
            e.below(0, 8)
            e.size(length, cols + 2)
        e.flag(contiguous)
        return self

    def submit(self):
        self.e.below(7, 14)
        return self

    def sync(self):
        self.e.below(9, 14)
        return self

    def reserve(self):
        self.e.below(10, 14)
        return self

    def set_cell(self, i, ty=1):
        self.e.below(11, 14)
        self.e.below(ty, 3)
        self.e.below(i, len(self.fills[ty]))
        return self

    def late_add(self, kind, ty, args):
        self.e.below(12, 14)
        self.e.below(["upload", "publish", "writes", "fill"].index(kind), 4)
        self.e.below(ty, 3)
        self._add(kind, ty, args)
        return self

    def bytes(self):
        return bytes(self.e.b)


def step_seeds():
    s = {}
    for fixed in (False, True):
        g = "fixed" if fixed else "pow2"
        full = (StepSeed(fixed).upload(32, 32).publish(16).target(4, 16, 8, 64).fill(8).fill(5, publish=0, index=3)
                .plan())
        s[f"full-step-{g}"] = (full.begin().span_upload(0, 20).span_publish(0, 8).stage(0, 1, 2, 10)
                               .stage(0, 1, 5, 3, contiguous=False).stage(0, 3, 0, 1, elem=True).submit().sync().bytes())
        many = StepSeed(fixed, slots=2, max_slots=2).upload(16, 16).target(2, 8, 4, 16).plan()
        for i in range(6):
            many.begin().span_upload(0, 4 + i).stage(0, i % 2, i, 2).submit()
        s[f"steps-unsynced-{g}"] = many.sync().bytes()
    s["later-write-wins"] = (StepSeed().target(3, 8, 8, 64).plan().begin().stage(0, 1, 0, 8).stage(0, 1, 2, 3)
                             .stage(0, 1, 1, 2, contiguous=False).submit().sync().bytes())
    s["mixed-types"] = (StepSeed().upload(10, 10, ty=0).upload(7, 7, ty=2).publish(4, ty=0).target(2, 5, 2, 10, ty=2)
                        .fill(9, ty=0).plan().begin().span_upload(0, 9, ty=0).span_upload(0, 7, ty=2)
                        .span_publish(0, 3, ty=0).stage(0, 1, 0, 5, ty=2).submit().sync().bytes())
    s["upload-beyond-destination"] = (StepSeed().upload(8, 8).plan().begin().span_upload(0, 9).span_upload(0, MAX64)
                                      .span_upload(0, 3).submit().sync().bytes())
    s["upload-replaced"] = StepSeed().upload(8, 4).plan().begin().span_upload(0, 2).span_upload(0, 6).submit().sync().bytes()
    s["fixed-upload-beyond-max"] = (StepSeed(True).upload(8, 4).plan().begin().span_upload(0, 6).span_upload(0, 4)
                                    .submit().sync().bytes())
    s["fixed-writes-beyond-max"] = (StepSeed(True).target(2, 8, 2, 6).plan().begin().stage(0, 0, 0, 4).stage(0, 1, 0, 4)
                                    .stage(0, 1, 0, 2).stage(0, 0, 4, 1).submit().sync().bytes())
    s["writes-out-of-bounds"] = (StepSeed().target(2, 8, 4, 16).plan().begin().stage(0, 2, 0, 1).stage(0, 0, 9, 0)
                                 .stage(0, 0, 4, 5).stage(0, 0, 1, MAX64).stage(0, 1, 7, 1).submit().sync().bytes())
    s["fill-index-past-publish"] = (StepSeed().publish(8).fill(4, publish=0, index=5).plan().begin().span_publish(0, 3)
                                    .submit().span_publish(0, 6).submit().sync().bytes())
    s["fill-device-value-changes"] = (StepSeed().fill(6).plan().begin().submit().sync().set_cell(0).begin().submit()
                                      .sync().bytes())
    s["calls-outside-a-step"] = (StepSeed().upload(4, 4).publish(4).target(1, 4, 1, 4).plan().span_upload(0, 2)
                                 .span_publish(0, 1).stage(0, 0, 0, 2).submit().begin().begin().submit().sync().bytes())
    s["late-add-after-begin"] = (StepSeed().upload(4, 4).plan().begin().late_add("publish", 1, (4,)).submit()
                                 .late_add("upload", 1, (4, 2)).sync().bytes())
    s["reserve-then-steps"] = StepSeed().upload(16, 16).plan().reserve().begin().span_upload(0, 16).submit().sync().bytes()
    s["publish-huge-max"] = StepSeed().publish(1 << 62).plan().begin().submit().sync().bytes()
    s["writes-huge-max"] = StepSeed().target(2, 2, 1, MAX64).plan().begin().submit().sync().bytes()
    s["empty-plan"] = StepSeed().plan().begin().submit().begin().submit().sync().bytes()
    s["publish-views"] = (StepSeed().publish(16).publish(3).plan().begin().span_publish(0, 16).span_publish(1, 2)
                          .submit().sync().bytes())
    s["bad-counts-one-slot"] = StepSeed.bad_counts(1, 2)
    s["bad-counts-above-max"] = StepSeed.bad_counts(2, 1)
    return s


# ---- step_plan ----------------------------------------------------------------------------------
PLAN_REGION = 2048
PLAN_SIZES = (1, 4, 8)  # type index 0, 1, 2: uint8, uint32, uint64


class PlanSeed:
    """A step_plan_fuzz input (see plan_run): entries at byte offsets of the region, in elements
    of type index `ty` (0: uint8, 1: uint32, 2: uint64)."""

    def __init__(self, fixed=False, pad=1, slots=2, max_slots=4, ceiling=None, arena_cap=None, fails=None,
                 epilogue=True):
        e = self.e = Enc()
        # arena_cap None: 64 MiB; else 2^k bytes for k in [11, 15] (a tight arena)
        e.byte(3 + 4 * (arena_cap - 11) if arena_cap is not None else 0)
        e.flag(fixed)
        e.below(pad, 3)  # the epilogue's state: 0, 200 or 5000 bytes beside its references
        e.raw(0x5EED, 2)
        e.below(slots - 2, 3)
        e.below(max_slots - slots, 4)
        if ceiling is None:
            e.below(2, 8)
        elif ceiling == "max":
            e.below(0, 8)
        else:
            e.below(1, 8)
            e.below(ceiling - 24, 24)
        self.fixed = fixed
        self.fails, self.epilogue = fails, epilogue
        self.entries = []
        self.lists = {k: {0: [], 1: [], 2: []} for k in ("upload", "publish", "writes", "gather", "fill")}
        self.open = False

    # The plan: (kind, type, args); plan() writes them and the epilogue's choices. Entries the
    # library refuses still take their place in the input but are not listed.
    def upload(self, at, n, max_n=None, ty=1, refused=False):
        self.entries.append(("upload", ty, (at, n, n if max_n is None else max_n), refused))
        return self

    def publish(self, max_n, ty=1):
        self.entries.append(("publish", ty, (max_n,), False))
        return self

    def writes(self, at, rows, cols, max_writes, max_elements, ty=1, refused=False):
        self.entries.append(("writes", ty, (at, rows, cols, max_writes, max_elements), refused))
        return self

    def gather(self, at, n, src_at, src_n, max_n=None, ty=1, refused=False):
        self.entries.append(("gather", ty, (at, n, src_at, src_n, n if max_n is None else max_n), refused))
        return self

    def fill(self, at, n, value_at=None, publish=None, index=0, ty=1, refused=False):
        self.entries.append(("fill", ty, (at, n, value_at, publish, index), refused))
        return self

    def _place(self, ty, at, n, most):
        size = PLAN_SIZES[ty]
        assert at % size == 0
        self.e.below(at // size, PLAN_REGION // size)
        self.e.below(n, min((PLAN_REGION - at) // size, most) + 1)

    def _max(self, n, max_n):
        if max_n <= n:
            self.e.below(1, 8)
            self.e.below(max_n, n + 1)
        else:
            self.e.below(0, 8)
            self.e.below(max_n - n - 1, 4)

    def plan(self):
        e = self.e
        e.below(len(self.entries), 11)
        for kind, ty, args, refused in self.entries:
            e.below(["upload", "publish", "writes", "gather", "fill"].index(kind), 5)
            e.below(ty, 3)
            if kind == "upload":
                at, n, max_n = args
                self._place(ty, at, n, 64)
                self._max(n, max_n)
                entry = (n, max_n)
            elif kind == "publish":
                (max_n,) = args
                e.size(max_n, 40)
                entry = max_n
            elif kind == "writes":
                at, rows, cols, mw, me = args
                self._place(ty, at, rows * cols, 256)
                e.below(cols - 1, max(rows * cols, 1))
                e.size(mw, 9)
                e.size(me, 65)
                entry = (rows, cols)
            elif kind == "gather":
                at, n, src_at, src_n, max_n = args
                self._place(ty, at, n, 64)
                self._place(ty, src_at, src_n, 64)
                self._max(n, max_n)
                entry = (n, src_n, max_n)
            else:
                at, n, value_at, publish, index = args
                self._place(ty, at, n, 64)
                pubs = self.lists["publish"][ty]
                if pubs:
                    e.flag(publish is not None)
                if publish is not None:
                    e.below(publish, len(pubs))
                    e.below(index, min(pubs[publish], 64) + 2)
                else:
                    size = PLAN_SIZES[ty]
                    e.below(value_at // size, PLAN_REGION // size)
                entry = n
            if not refused:
                self.lists[kind][ty].append(entry)
        if not self.epilogue:
            e.below(0, 8)
            return self
        e.below(1, 8)
        if self.fails is None:
            e.below(1, 4)
        else:
            e.below(0, 4)
            e.below(self.fails, 6)
        return self

    # The steps.
    def op(self, k):
        self.e.below(k, 16)
        return self

    def begin(self):
        self.open = True
        return self.op(0)

    def span_upload(self, i, n, ty=1):
        e = self.op(1).e
        e.below(ty, 3)
        ups = self.lists["upload"][ty]
        if not ups:
            return self
        e.below(i, len(ups))
        limit = ups[i][0]
        e.count(n, limit + 1, limit + 2)
        return self

    def span_publish(self, i, n, ty=1):
        e = self.op(3).e
        e.below(ty, 3)
        pubs = self.lists["publish"][ty]
        if not pubs:
            return self
        e.below(i, len(pubs))
        e.count(n, min(pubs[i], 64) + 2, pubs[i] + 2)
        return self

    def stage(self, i, row, start, length, elem=False, contiguous=True, ty=1):
        e = self.op(4).e
        e.below(ty, 3)
        ws = self.lists["writes"][ty]
        if not ws:
            return self
        e.below(i, len(ws))
        rows, cols = ws[i]
        e.below(0 if elem else 1, 4)
        e.below(1, 8)
        e.below(row, rows)
        e.below(1, 8)
        e.below(start, cols + 1)
        e.below(1, 8)
        e.below(length, cols - start + 1)
        e.flag(contiguous)
        return self

    def indices(self, i, rows, host_values=False, bad=None, ty=1):
        """gather i's indices: `rows` a list of source rows, None for ferry::from_host; `bad`
        (position, value) a bad row; then host_values() if asked."""
        e = self.op(6).e
        e.below(ty, 3)
        gs = self.lists["gather"][ty]
        if not gs:
            return self
        e.below(i, len(gs))
        limit, src_n, max_n = gs[i]
        n = len(rows)
        assert n <= limit
        e.below(1, 8)
        e.below(n, limit + 1)
        if not self.open or (self.fixed and n > max_n):
            return self
        with_host = any(r is None for r in rows)
        e.flag(with_host)
        for r in rows:
            if src_n == 0:
                assert r is None
                continue
            if with_host:
                e.below(0 if r is None else 1, 4)
            if r is not None:
                e.below(r, src_n)
        if n != 0:
            if bad is None:
                e.below(1, 8)
            else:
                e.below(0, 8)
                at, value = bad
                if value >= 0:
                    e.flag(True)
                    e.below(value - src_n, 3)
                else:
                    e.flag(False)
                    e.below(-2 - value, 3)
                e.below(at, n)
        e.flag(host_values)
        return self

    def host_values(self, i, ty=1):
        e = self.op(8).e
        e.below(ty, 3)
        if self.lists["gather"][ty]:
            e.below(i, len(self.lists["gather"][ty]))
        return self

    def submit(self, refused=False):
        self.open = refused  # a refused submit leaves the step open
        return self.op(9)

    def sync(self):
        return self.op(11)

    def reserve(self):
        return self.op(12)

    def cancel(self):
        self.open = False
        return self.op(13)

    def poke(self, at, values):
        self.op(14)
        self.e.below(at, PLAN_REGION)
        self.e.below(len(values) - 1, 64)
        for v in values:
            self.e.byte(v)
        return self

    def bytes(self):
        return bytes(self.e.b)


def step_plan_seeds():
    s = {}
    # Every kind of entry, apart, and steps that fill each: the epilogue logs what it sees.
    for fixed in (False, True):
        g = "fixed" if fixed else "pow2"
        x = (PlanSeed(fixed).upload(0, 16).publish(8).writes(128, 4, 8, 6, 32).gather(256, 12, 512, 20)
             .fill(640, 10, value_at=700).fill(720, 3, publish=0, index=2).upload(800, 5, ty=2).plan())
        for k in range(4):
            (x.begin().span_upload(0, 10 + k).span_publish(0, 3 + k).stage(0, k, 1, 5).stage(0, k, 3, 1, elem=True)
             .indices(0, [k, 19, None, 3], host_values=True).span_upload(0, 5, ty=2).submit())
        s[f"every-kind-{g}"] = x.sync().bytes()
    # Overlaps in every order: each refused entry covers what one before it writes or reads.
    s["overlaps-every-order"] = (
        PlanSeed().gather(0, 8, 64, 16).fill(200, 4, value_at=300)
        .writes(72, 2, 4, 4, 8, refused=True)       # a write target over the gather's source
        .upload(296, 4, refused=True)               # an upload over the fill's value
        .gather(96, 2, 0, 4, refused=True)          # a gather from the other's destination
        .fill(60, 2, value_at=600, refused=True)    # a fill's destination over the gather's source
        .gather(400, 4, 304, 1).writes(440, 1, 4, 1, 4)
        .plan().begin().indices(0, [1, 2, 3]).indices(1, [0, 0]).stage(0, 0, 0, 4).submit().sync().bytes())
    s["gather-own-source"] = PlanSeed().gather(0, 8, 16, 8, refused=True).gather(64, 4, 128, 4).plan().sync().bytes()
    s["gather-bad-rows"] = (PlanSeed().gather(0, 8, 64, 4).plan().begin().indices(0, [1, 2, 3], bad=(1, 4))
                            .submit(refused=True).indices(0, [0, None], bad=(0, -3)).submit(refused=True)
                            .indices(0, [None, 1]).submit(refused=True).host_values(0).submit().sync().bytes())
    s["epilogue-throws"] = (PlanSeed(fails=1).upload(0, 8).gather(64, 4, 128, 4).plan()
                            .begin().span_upload(0, 8).indices(0, [3, 2]).submit()
                            .begin().span_upload(0, 7).submit().begin().span_upload(0, 6).submit().sync()
                            .begin().span_upload(0, 2).submit().sync().bytes())
    s["epilogue-state-5000-bytes"] = (PlanSeed(pad=2).upload(0, 4).publish(4, ty=2).gather(64, 4, 128, 4, ty=0).plan()
                                      .begin().span_upload(0, 4).span_publish(0, 4, ty=2).indices(0, [1, 3], ty=0)
                                      .submit().sync().bytes())
    s["no-epilogue"] = PlanSeed(epilogue=False).upload(0, 8).plan().begin().span_upload(0, 8).submit().sync().bytes()
    # A tight arena: spans that outgrow the slot may be refused, losing nothing (the step's earlier
    # spans and indices are what its submit carries).
    tight = (PlanSeed(arena_cap=13).upload(0, 64, max_n=1, ty=2).publish(1, ty=2).gather(1024, 64, 1536, 64, max_n=1, ty=2)
             .plan())
    for k in range(3):
        (tight.begin().indices(0, [k, 63, None], host_values=True, ty=2).span_upload(0, 8, ty=2)
         .span_publish(0, 40 + k, ty=2).span_upload(0, 64, ty=2).span_publish(0, 60, ty=2).submit())
    s["tight-arena-growth"] = tight.sync().bytes()
    # A 4 KiB arena whose three slots hold it nearly all once step 1's publish grew its slot: the
    # upload's first span of step 1 is refused, and the submit, which needs no more room, carries
    # nothing of it (the step once read the refused size from address 0).
    s["span-refused-in-a-full-slot"] = (
        PlanSeed(arena_cap=12, slots=3, max_slots=3, epilogue=False).upload(0, 64, max_n=1, ty=2).publish(1, ty=0)
        .plan().begin().span_publish(0, 500, ty=0).submit().sync().begin().span_publish(0, 1000, ty=0)
        .span_upload(0, 64, ty=2).submit().sync().bytes())
    ceiling = PlanSeed(ceiling="max").upload(0, 32).publish(4).plan()
    for k in range(8):
        ceiling.begin().span_upload(0, 32 - k).span_publish(0, 4).submit()
    s["ceiling-size-max"] = ceiling.sync().bytes()
    s["ceiling-2^40"] = PlanSeed(ceiling=40).upload(0, 8).plan().begin().span_upload(0, 8).submit().sync().bytes()
    s["cancel-then-steps"] = (PlanSeed().upload(0, 8).gather(64, 4, 128, 4).plan().begin().span_upload(0, 8)
                              .indices(0, [1]).cancel().begin().span_upload(0, 3).submit().sync().bytes())
    s["poke-sources"] = (PlanSeed().gather(0, 4, 64, 4).fill(128, 4, value_at=256).plan().begin().indices(0, [3, 0])
                         .submit().sync().poke(64, [9, 8, 7, 6, 5]).poke(256, [1, 2, 3, 4]).begin()
                         .indices(0, [1, 2]).submit().sync().bytes())
    return s


# ---- growth -------------------------------------------------------------------------------------
def growth_answer(e, how, value=0):
    """One input_growth answer: "needed", "more" (+value), "pow2", "huge" (2^value, value in
    [48, 64]; 64: 2^64 - 1), "max" (2^64 - 1 - value), "throw", "current" (+value)."""
    if how == "needed":
        e.byte(0)
    elif how == "more":
        e.byte(2)
        e.below(value, 4096)
    elif how == "pow2":
        e.byte(3)
    elif how == "huge":
        e.byte(4)
        e.below(value - 48, 17)
    elif how == "max":
        e.byte(5)
        e.below(value, 256)
    elif how == "throw":
        e.byte(6)
    else:
        e.byte(7)
        e.below(value, 1 << 16)


def growth_seeds():
    """Growth seeds: each component with answers placed where its calls ask (the answers are
    read from the same input as the operations, at the point the component asks)."""
    s = {}

    def pool(answers_at_make, copies, width=1, initial=4, slots=2, max_slots=4):
        e = Enc()
        e.below(0, 3)
        e.raw(0x77, 2)
        e.below(width - 1, 4)
        e.size(initial, 9)
        e.below(slots - 1, 3)
        e.below(max_slots - slots, 4)
        for a in answers_at_make:
            growth_answer(e, *a)
        for rows, answers in copies:
            if rows is None:
                e.below(0, 4)  # synchronize
                continue
            e.below(1, 4)
            if rows < 40:
                e.below(1, 8)
                e.below(rows, 40)
            else:
                e.below(0, 8)
                e.below(rows, 4096)
            if width > 1:
                e.below(1, 8)
            for a in answers:
                growth_answer(e, *a)
        return bytes(e.b)

    s["pool-grow-needed"] = pool([], [(8, [("needed",)]), (3, []), (30, [("needed",)])])
    s["pool-grow-pow2-rows"] = pool([], [(9, [("pow2",)]), (17, [("pow2",)]), (None, []), (5, [])], width=3)
    s["pool-grow-more"] = pool([], [(12, [("more", 100)]), (12, [("more", 4095)])])
    s["pool-grow-refused"] = pool([], [(2, []), (20, [("throw",)]), (2, [])])
    s["pool-grow-refused-then-ok"] = pool([], [(3, []), (50, [("throw",)]), (50, [("needed",)]), (None, []), (1, [])])
    s["pool-grow-current"] = pool([], [(6, [("current", 3)]), (600, [("current", 1000)])])
    s["pool-one-slot"] = pool([], [(5, [("needed",)]), (None, []), (9, [("pow2",)])], slots=1, max_slots=1)

    def staged_seed(build):
        seed = StagedSeed(rows=4, cols=16, prefix=lambda e: e.below(1, 3))
        build(seed)
        return seed.bytes()

    def answers(seed, *items):
        for a in items:
            growth_answer(seed.e, *a)
        return seed

    s["staged-grow-needed"] = staged_seed(lambda x: answers(answers(x.write(0, 0, 16), ("needed",), ("needed",))
                                                            .write(1, 0, 8), ("needed",), ("needed",), ("needed",))
                                          .apply())
    s["staged-grow-pow2"] = staged_seed(lambda x: answers(answers(x.write(0, 0, 16), ("pow2",), ("pow2",)).apply(),
                                                          ("pow2",)))
    s["staged-stage-refused"] = staged_seed(lambda x: answers(answers(x.write(0, 0, 4), ("needed",), ("needed",))
                                                              .write(1, 0, 16), ("throw",)).apply())
    s["staged-reserve-refused"] = staged_seed(lambda x: answers(answers(x.write(0, 0, 4), ("needed",), ("needed",))
                                                                .reserve(4, 32), ("throw",)).apply())
    s["staged-apply-refused"] = staged_seed(lambda x: answers(answers(x.write(0, 0, 16), ("needed",), ("needed",))
                                                              .apply(), ("throw",)).apply())
    s["staged-grow-more"] = staged_seed(lambda x: answers(x.write(2, 0, 16), ("more", 7), ("more", 300)).apply())

    def step_seed(build):
        seed = StepSeed(prefix=lambda e: e.below(2, 3))
        build(seed)
        return seed.bytes()

    def step_answers(seed, *items):
        for a in items:
            growth_answer(seed.e, *a)
        return seed

    s["step-grow-needed"] = step_seed(lambda x: step_answers(x.upload(32, 8).target(2, 16, 1, 4).plan().begin(),
                                                             ("needed",), ("needed",))
                                      .span_upload(0, 32).stage(0, 0, 0, 16).stage(0, 1, 0, 16).submit())
    s["step-grow-pow2-steps"] = step_seed(lambda x: step_answers(step_answers(x.upload(64, 4).publish(2).plan().begin(),
                                                                              ("pow2",), ("pow2",))
                                                                 .span_upload(0, 64).span_publish(0, 20).submit(),
                                                                 ("pow2",)).sync().begin().span_upload(0, 3).submit())
    s["step-begin-refused"] = step_seed(lambda x: step_answers(x.upload(16, 16).plan().begin(), ("throw",))
                                        .begin())
    s["step-reserve-refused"] = step_seed(lambda x: step_answers(x.publish(8).plan().reserve(), ("throw",))
                                          .begin().submit().sync())
    return s


# ---- values (ferry_vllm's conversion core) ------------------------------------------------------
VALUE_TARGETS = {"int32": 0, "int64": 1, "float32": 2}
EDGE_DOUBLES = [2.0**31, 2.0**63, 2.0**24, 2.0**53, 2.0**64, 2.0**127, 2.0**128, 3.4028234663852886e38, 2.0**-149,
                0.5, 2.7, 1.0, 0.0, "inf", "nan", 2.0**128 - 2.0**103, 2.0**128 - 2.0**104, "max"]
VALUE_FORMATS = ["?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "n", "N", "e", "f", "d", "g", "Zf", "Zd",
                 "O", "s", "3s", "w", "x", "c", "P", "<i", ">q", "=l", "!H", "@d", "T{i:a:}"]
# (kind, size, swapped) as values_fuzz.cpp's encodings, in its order.
VALUE_ENCODINGS = [("bool", 1, False), ("int", 1, False), ("uint", 1, False), ("int", 2, False), ("uint", 2, True),
                   ("int", 4, False), ("uint", 4, False), ("int", 8, True), ("uint", 8, False), ("float", 2, False),
                   ("float", 4, False), ("float", 8, False), ("float", 8, True), ("bfloat16", 2, False)]


def values_seeds():
    """Values seeds: one case each (values_fuzz.cpp reads up to 64 cases from an input)."""
    s = {}

    def case(target, what):
        e = Enc()
        e.below(VALUE_TARGETS[target], 3)
        e.below({"value": 0, "format": 1, "array": 2}[what], 3)
        return e

    def value(target, tag, v, negative=False, edge_step=0):
        e = case(target, "value")
        if tag == "bool":
            e.below(0, 4)
            e.flag(v)
        elif tag in ("int", "uint"):
            e.below(1 if tag == "int" else 2, 4)
            e.flag(False)  # any 64-bit value
            e.raw(v)
            if tag == "int":
                e.flag(negative)
        else:
            e.below(3, 4)
            if v in EDGE_DOUBLES:
                i = EDGE_DOUBLES.index(v)
                e.byte(i + len(EDGE_DOUBLES) * edge_step)
                e.flag(negative)
            else:  # any bit pattern: no sign read after it
                e.byte(128)
                e.raw(int.from_bytes(struct.pack("<d", -v if negative else v), "little"))
        return bytes(e.b)

    def fmt(target, f, itemsize):
        e = case(target, "format")
        e.below(VALUE_FORMATS.index(f), len(VALUE_FORMATS))
        e.below(1, 8)  # no trailing junk
        e.below(1, 8)  # the format as listed
        if itemsize in (1, 2, 4, 8):
            e.below(1, 8)
            e.below(itemsize.bit_length() - 1, 4)
        else:
            e.below(0, 8)
            e.below(itemsize, 20)
        return bytes(e.b)

    def array(target, encoding, shape, data, strides=None, swap=False):
        e = case(target, "array")
        i = VALUE_ENCODINGS.index(encoding)
        e.below(i, len(VALUE_ENCODINGS))
        if encoding[1] > 1:
            e.below(0 if swap else 1, 4)
        e.below(len(shape), 4)
        for extent in shape:
            e.below(extent, 6)
        e.flag(strides is None)
        if strides is not None:
            for st in reversed(strides):  # read innermost first
                e.below(st + 3, 7)
        # The bytes the target reads: from the lowest to the highest element, strides in items.
        steps = strides if strides is not None else [0] * len(shape)
        low = sum(min(0, (x - 1) * st) for x, st in zip(shape, steps) if x)
        high = sum(max(0, (x - 1) * st) for x, st in zip(shape, steps) if x)
        if strides is None:
            high = max(1, math.prod(shape)) - 1
        need = (high - low + 1) * encoding[1]
        assert len(data) == need, (len(data), need)
        e.b += data
        return bytes(e.b)

    s["int32-from-int-2pow40-plus-5"] = value("int32", "int", 2**40 + 5)
    s["int32-from-int-min"] = value("int32", "int", 2**31, negative=True)
    s["int32-from-2.7"] = value("int32", "float", 2.7)
    s["int32-from-just-below-2pow31-double"] = value("int32", "float", 2.0**31, edge_step=2)
    s["int32-from-nan"] = value("int32", "float", "nan")
    s["int64-from-uint64-max"] = value("int64", "uint", 2**64 - 1)
    s["int64-from-2pow63-double"] = value("int64", "float", 2.0**63)
    s["int64-from-minus-2pow63-double"] = value("int64", "float", 2.0**63, negative=True)
    s["float32-from-2pow24-plus-1"] = value("float32", "int", 2**24 + 1)
    s["float32-from-int64-max"] = value("float32", "int", 2**63 - 1)
    s["float32-from-uint64-max"] = value("float32", "uint", 2**64 - 1)
    s["float32-from-1e39"] = value("float32", "float", 1e39)
    s["float32-from-rounding-threshold"] = value("float32", "float", 2.0**128 - 2.0**103)
    s["float32-from-below-threshold"] = value("float32", "float", 2.0**128 - 2.0**103, edge_step=2)
    s["float32-from-inf"] = value("float32", "float", "inf", negative=True)
    s["float32-from-bool"] = value("float32", "bool", True)
    s["format-little-int32"] = fmt("int32", "<i", 4)
    s["format-big-int64"] = fmt("int64", ">q", 8)
    s["format-native-long"] = fmt("int64", "l", 8)
    s["format-standard-long"] = fmt("int64", "=l", 4)
    s["format-half"] = fmt("float32", "e", 2)
    s["format-complex-refused"] = fmt("float32", "Zf", 8)
    s["format-wrong-itemsize"] = fmt("int32", "i", 3)
    s["array-int64-into-int32-2d"] = array("int32", ("int", 8, True), (2, 3),
                                            b"".join(struct.pack(">q", v) for v in [1, -2, 3, 4, 2**40 + 5, 6]))
    s["array-half-into-int32"] = array("int32", ("float", 2, False), (4,),
                                        b"".join(struct.pack("<e", v) for v in [1.0, -3.0, 65504.0, 2.5]))
    s["array-bfloat16-into-float32"] = array("float32", ("bfloat16", 2, False), (3,), bytes([0x80, 0x3f, 0, 0xc0, 0x80, 0x7f]))
    s["array-negative-strides"] = array("int64", ("int", 4, False), (3, 2),
                                         b"".join(struct.pack("<i", v) for v in range(-4, 2)), strides=(-2, 1))
    s["array-zero-stride"] = array("float32", ("float", 8, False), (2, 4), struct.pack("<d", 1e300), strides=(0, 0))
    s["array-bool-3d"] = array("int32", ("bool", 1, False), (2, 2, 2), bytes([0, 1, 2, 255, 0, 0, 1, 1]))
    return s


def main():
    root = pathlib.Path(__file__).resolve().parent / "corpus"
    for target, seeds in (("dlpack", dlpack_seeds()), ("staged", staged_seeds()), ("step", step_seeds()),
                          ("step_plan", step_plan_seeds()), ("growth", growth_seeds()), ("values", values_seeds())):
        d = root / target
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("seed-*"):
            old.unlink()
        for name, data in sorted(seeds.items()):
            (d / f"seed-{name}").write_bytes(data)
        print(f"{target}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
