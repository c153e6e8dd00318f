# torch.compile(fullgraph=True) traces ferry_vllm's free functions and StepBatch.submit: each is a
# torch.library op (ferry_vllm::async_tensor_h2d, ::uva_view, ::step) with a fake kernel, so the
# compiled function has no graph break; compiled with backend="aot_eager" (functionalization and
# the fake kernels included) and checked against the eager result, on each device served here.
import numpy as np
import pytest
import torch

import ferry_vllm as fv


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_async_tensor_h2d_compiles(device):
    def f(x):
        t = fv.async_tensor_h2d(x, device, torch.int32)
        return t * 2 + 1

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    for n in (5, 9):
        x = torch.arange(n, dtype=torch.int64).reshape(-1, 1) - 3
        got = compiled(x)
        assert got.device.type == device and got.dtype == torch.int32 and got.shape == (n, 1)
        assert torch.equal(got.cpu(), (x * 2 + 1).to(torch.int32))
    with pytest.raises(Exception, match="ferry: async_tensor_h2d: value 1099511627776 at position 0"):
        compiled(torch.tensor([2**40]))  # the op converts exactly when it runs


def test_uva_view_compiles():
    platform = fv.current_platform.device_type

    def f(x):
        return fv.get_accelerator_view_from_cpu_tensor(x).sum(dim=0)

    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    assert got.device.type == platform and torch.equal(got.cpu(), x.sum(dim=0))
    assert torch.ops.ferry_vllm.uva_view.default is not None


def test_step_submit_compiles(device):
    sb = fv.StepBatch(device=device)
    src = torch.arange(100, 200, dtype=torch.int32, device=device)
    rows = torch.zeros(8, dtype=torch.int32, device=device)
    ids = torch.zeros(8, dtype=torch.int32, device=device)
    sb.add_upload(rows)
    sb.add_gather(ids, src)

    def f(r, idx, host):
        rows_now, ids_now = sb.submit([r], gathers=[idx], host_values=[host])  # the plan's destinations
        return rows_now[: r.numel()] + ids_now[: idx.numel()]

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    r = torch.tensor([3, 1, 4, 1], dtype=torch.int32)
    idx = torch.tensor([5, fv.FROM_HOST, 0, 99], dtype=torch.int32)
    host = torch.tensor([0, -7, 0, 0], dtype=torch.int32)
    got = compiled(r, idx, host)
    want = r + torch.tensor([105, -7, 100, 199], dtype=torch.int32)
    assert torch.equal(got.cpu(), want) and sb.steps == 1
    np.testing.assert_array_equal(ids[:4].cpu().numpy(), [105, -7, 100, 199])


@pytest.mark.skipif(not (fv.CUDA and torch.cuda.is_available()), reason="CUDA graph capture needs the CUDA build and a GPU")
def test_what_is_capture_safe():
    # docs/python.md's table: views and staging touch no stream (safe under capture); every call
    # that enqueues work raises a ferry: RuntimeError on a capturing stream, having enqueued nothing.
    staged = fv.StagedWriteTensor((2, 8), torch.int32, "cuda")
    pool = fv.UvaBufferPool(8, torch.int32, device="cuda")
    backed = fv.UvaBackedTensor(8, torch.int32, device="cuda")
    buf = fv.CpuGpuBuffer(8, dtype=torch.int32, device="cuda")
    sb = fv.StepBatch(device="cuda")
    dst = torch.zeros(4, dtype=torch.int32, device="cuda")
    sb.add_upload(dst)
    pinned = torch.arange(8, dtype=torch.int32).pin_memory()
    # A tensor's staging slots (max_concurrency of them) are made by its first applies, one each
    # (pinned memory: an allocation, which a capture refuses); once each was used and its apply has
    # run, staging is host work alone.
    for _ in range(staged.max_concurrency):
        staged.stage_write(0, 0, [1])
        staged.apply_write()
    eager = [
        lambda: staged.apply_write(),
        lambda: fv.FusedStagedWriter("cuda", 4).apply([staged]),
        lambda: fv.async_tensor_h2d([1, 2], "cuda", torch.int32),
        lambda: pool.copy_to_uva([1, 2]),
        lambda: backed.copy_to_uva(),
        lambda: buf.copy_to_gpu(),
        lambda: sb.step([[1, 2]], []),
    ]
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    failures = []
    with torch.cuda.graph(graph):
        view = fv.get_accelerator_view_from_cpu_tensor(pinned)  # safe: no stream work
        doubled = view * 2
        staged.stage_write(1, 2, [5, 6])  # safe once its staging exists: host work only
        for i, call in enumerate(eager):
            try:
                call()
                failures.append(f"call {i} did not raise")
            except RuntimeError as e:
                if not str(e).startswith("ferry: ") or "captur" not in str(e):
                    failures.append(f"call {i}: {e}")
    assert not failures, failures
    pinned.fill_(3)
    graph.replay()
    torch.cuda.synchronize()
    assert doubled.cpu().tolist() == [6] * 8 and sb.steps == 0
    staged.apply_write()
    torch.cuda.synchronize()
    assert staged.gpu[1, 2:4].cpu().tolist() == [5, 6]
