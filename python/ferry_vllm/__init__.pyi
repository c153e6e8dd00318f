# Type stubs of ferry_vllm: vLLM's buffer utilities over ferry's C++ components (docs/python.md).
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NamedTuple, Union

import numpy as np
import torch

__version__: str
CUDA: bool
backends: tuple[str, ...]
FROM_HOST: int

_Device = Union[torch.device, str, int]
_Size = Union[int, Sequence[int], torch.Size]
# A source of values: a sequence or iterable of numbers, a NumPy array, a CPU tensor.
_Values = Union[Sequence[Union[int, float, bool]], Iterable[Union[int, float, bool]], np.ndarray, torch.Tensor]
_Number = Union[int, float, bool, np.number, np.bool_, torch.Tensor]

class _Platform:
    @property
    def device_type(self) -> Literal["cpu", "cuda"]: ...
    def is_cuda(self) -> bool: ...
    def is_xpu(self) -> bool: ...
    def is_cpu(self) -> bool: ...

current_platform: _Platform

def set_default_max_concurrency(n: int) -> None: ...
def is_uva_available() -> bool: ...
def async_tensor_h2d(
    data: _Values,
    *args: Any,
    dtype: torch.dtype | None = ...,
    device: _Device | None = ...,
    target_device: _Device | None = ...,
    pin_memory: bool | None = ...,
    out: torch.Tensor | None = ...,
) -> torch.Tensor: ...
def get_accelerator_view_from_cpu_tensor(cpu_tensor: torch.Tensor) -> torch.Tensor: ...
def async_copy_to_gpu(
    x: torch.Tensor | np.ndarray, out: torch.Tensor | None = ..., device: _Device | None = ...
) -> torch.Tensor: ...

class CpuGpuBuffer:
    cpu: torch.Tensor
    gpu: torch.Tensor
    np: np.ndarray
    def __init__(
        self,
        *size: int,
        dtype: torch.dtype,
        device: _Device | None = ...,
        pin_memory: bool = ...,
        with_numpy: bool = ...,
    ) -> None: ...
    def copy_to_gpu(self, n: int | None = ...) -> torch.Tensor: ...
    def copy_to_cpu(self, n: int | None = ...) -> torch.Tensor: ...

class UvaBuffer:
    cpu: torch.Tensor
    np: np.ndarray
    uva: torch.Tensor
    def __init__(self, size: _Size, dtype: torch.dtype, *, device: _Device | None = ...) -> None: ...

class UvaBufferPool:
    size: _Size
    dtype: torch.dtype
    max_concurrency: int
    def __init__(
        self, size: _Size, dtype: torch.dtype, max_concurrency: int | None = ..., *, device: _Device | None = ...
    ) -> None: ...
    @property
    def _curr(self) -> int: ...
    @property
    def _uva_bufs(self) -> list[UvaBuffer]: ...
    def copy_to_uva(self, x: _Values) -> torch.Tensor: ...
    def copy_chunks_to_uva(self, chunks: Sequence[_Values], n: int) -> torch.Tensor: ...
    def copy_to_gpu(self, x: _Values, out: torch.Tensor | None = ...) -> torch.Tensor: ...
    def record_use(self) -> None: ...

class UvaBackedTensor:
    dtype: torch.dtype
    cpu: torch.Tensor
    np: np.ndarray
    gpu: torch.Tensor
    def __init__(
        self, size: _Size, dtype: torch.dtype, max_concurrency: int | None = ..., *, device: _Device | None = ...
    ) -> None: ...
    def copy_to_uva(self, n: int | None = ...) -> torch.Tensor: ...

class StagedWriteTensor:
    num_rows: int
    dtype: torch.dtype
    device: _Device
    max_concurrency: int
    gpu: torch.Tensor
    write_contents: StagedWriteTensor | None
    def __init__(
        self,
        size: _Size,
        dtype: torch.dtype,
        device: _Device,
        max_concurrency: int | None = ...,
        uva_instead_of_gpu: bool = ...,
    ) -> None: ...
    def stage_write(self, index: int, start: int, x: _Values) -> None: ...
    def stage_write_elem(self, index: int, x: _Number) -> None: ...
    def apply_write(self) -> None: ...
    def clear_staged_writes(self) -> None: ...
    @property
    def num_staged_writes(self) -> int: ...

class FusedStagedWriter:
    device: _Device
    max_writes: int
    def __init__(self, device: _Device, max_writes: int, max_concurrency: int | None = ...) -> None: ...
    def apply(
        self,
        tensors: Sequence[StagedWriteTensor],
        output_ptrs: torch.Tensor | None = ...,
        output_strides: torch.Tensor | None = ...,
    ) -> None: ...

class StepBatch:
    device: torch.device
    def __init__(self, max_concurrency: int | None = ..., *, device: _Device | None = ...) -> None: ...
    def add_upload(self, dst: torch.Tensor) -> int: ...
    def add_writes(self, target: torch.Tensor, max_writes: int, max_elements: int) -> int: ...
    def add_gather(self, dst: torch.Tensor, src: torch.Tensor, max_n: int | None = ...) -> int: ...
    def add_publish(self, dtype: torch.dtype, max_n: int) -> int: ...
    def add_fill(
        self, dst: torch.Tensor, value: torch.Tensor | None = ..., *, publish: int | None = ..., index: int = ...
    ) -> None: ...
    def set_decode_epilogue(
        self,
        rows: torch.Tensor,
        base: torch.Tensor,
        drafts: torch.Tensor | None = ...,
        *,
        block_table: torch.Tensor | None = ...,
        block_size: int = ...,
        num_computed: torch.Tensor | None = ...,
        positions: torch.Tensor | None = ...,
        seq_lens: torch.Tensor | None = ...,
        slot_mapping: torch.Tensor | None = ...,
    ) -> None: ...
    def step(
        self,
        uploads: Sequence[_Values | None],
        writes: Sequence[tuple[int, int, int, _Values]],
        gathers: Sequence[_Values | None] | None = ...,
        host_values: Sequence[_Values | None] | None = ...,
        publishes: Sequence[_Values | None] | None = ...,
    ) -> None: ...
    def submit(
        self,
        uploads: Sequence[torch.Tensor | None],
        gathers: Sequence[torch.Tensor | None] | None = ...,
        host_values: Sequence[torch.Tensor | None] | None = ...,
        publishes: Sequence[torch.Tensor | None] | None = ...,
    ) -> list[torch.Tensor]: ...
    def publish_view(self, publish: int) -> torch.Tensor: ...
    def record_use(self) -> None: ...
    @property
    def steps(self) -> int: ...

class VllmStepInputs(NamedTuple):
    input_ids: torch.Tensor
    positions: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    idx_mapping: torch.Tensor
    cu_num_logits: torch.Tensor
    logits_indices: torch.Tensor
    expanded_idx_mapping: torch.Tensor
    expanded_local_pos: torch.Tensor
    block_tables: tuple[torch.Tensor, ...]
    slot_mappings: torch.Tensor

class VllmStepPrep:
    device: torch.device
    max_num_reqs: int
    max_num_tokens: int
    num_kv_cache_groups: int
    num_computed_tokens: torch.Tensor
    last_sampled_tokens: torch.Tensor
    draft_tokens: torch.Tensor | None
    next_prefill_tokens: torch.Tensor | None
    input_ids: torch.Tensor
    positions: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    idx_mapping: torch.Tensor
    cu_num_logits: torch.Tensor
    logits_indices: torch.Tensor
    expanded_idx_mapping: torch.Tensor
    expanded_local_pos: torch.Tensor
    block_tables: tuple[torch.Tensor, ...]
    input_block_tables: tuple[torch.Tensor, ...]
    slot_mappings: torch.Tensor
    graph: bool
    def __init__(
        self,
        *,
        max_num_reqs: int,
        max_num_tokens: int,
        block_sizes: Sequence[int],
        max_num_blocks: Sequence[int],
        num_computed_tokens: torch.Tensor,
        last_sampled_tokens: torch.Tensor,
        draft_tokens: torch.Tensor | None = ...,
        kernel_block_sizes: Sequence[int] | None = ...,
        max_concurrency: int | None = ...,
        input_ids: torch.Tensor | None = ...,
        positions: torch.Tensor | None = ...,
        seq_lens: torch.Tensor | None = ...,
        query_start_loc: torch.Tensor | None = ...,
        input_block_tables: Sequence[torch.Tensor] | None = ...,
        slot_mappings: torch.Tensor | None = ...,
        next_prefill_tokens: torch.Tensor | None = ...,
        graph: bool = ...,
    ) -> None: ...
    def add_request(
        self,
        req_index: int,
        prefill_token_ids: _Values,
        block_ids: Sequence[_Values],
        num_computed_tokens: int = ...,
    ) -> None: ...
    def remove_request(self, req_index: int) -> None: ...
    def prepare(
        self,
        idx_mapping: _Values,
        num_scheduled_tokens: _Values,
        num_draft_tokens: _Values | None = ...,
        *,
        new_block_ids: Sequence[tuple[int, Sequence[_Values]]] | None = ...,
        num_reqs_padded: int | None = ...,
        num_tokens_padded: int | None = ...,
    ) -> None: ...
    # graph=True: record() once inside torch.cuda.graph(g), then commit() before each g.replay()
    def record(self) -> None: ...
    def commit(
        self,
        idx_mapping: _Values,
        num_scheduled_tokens: _Values,
        num_draft_tokens: _Values | None = ...,
        *,
        new_block_ids: Sequence[tuple[int, Sequence[_Values]]] | None = ...,
        num_reqs_padded: int | None = ...,
        num_tokens_padded: int | None = ...,
    ) -> None: ...
    def replay_recorded(self) -> None: ...
    def check_replayed(self) -> None: ...
    @property
    def replayed(self) -> int: ...
    def inputs(self) -> VllmStepInputs: ...
    def num_blocks(self, group: int, req_index: int) -> int: ...
    def is_prefilling(self, req_index: int) -> bool: ...
    @property
    def num_reqs(self) -> int: ...
    @property
    def num_tokens(self) -> int: ...
    @property
    def num_logits(self) -> int: ...
    @property
    def num_reqs_padded(self) -> int: ...
    @property
    def num_tokens_padded(self) -> int: ...
    @property
    def steps(self) -> int: ...
