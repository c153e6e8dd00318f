"""vLLM 0.26.0's step preparation, its own code: the files of its wheel this needs (fetched into
.carry/vllm, never committed), loaded unchanged but for their import lines, and the calls of its
model runner v2 that prepare a step, in its order (vllm/v1/worker/gpu/model_runner.py, cited by
line and checked before use). Used by tools/vllm-prep-oracle (the oracle of ferry_vllm.VllmStepPrep)
and benchmarks/python/bench_vllm_prep.py (the peer). See tools/vllm-prep-oracle for the rules.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRY = ROOT / ".carry" / "vllm"  # where --fetch puts vLLM's files
VERSION = "0.26.0"
# The files of the wheel this harness reads (paths under the wheel's root).
FILES = [
    "vllm/v1/worker/gpu/model_runner.py",  # read for its lines only: the order of the calls
    "vllm/v1/worker/gpu/input_batch.py",
    "vllm/v1/worker/gpu/block_table.py",
    "vllm/v1/worker/gpu/buffer_utils.py",
    "vllm/v1/worker/gpu/states.py",
    "vllm/v1/worker/cpu/buffer_utils.py",
    "vllm/v1/worker/cpu/shm.py",
    "vllm/v1/attention/backends/utils.py",
    "vllm/utils/__init__.py",
    "vllm/utils/torch_utils.py",
]
# model_runner.py of 0.26.0: (line, text that must be on it) for every call the harness makes in
# its order; checked before a run, so that another vLLM fails at once instead of comparing with
# something else.
CITED = {
    "finish_requests": (1162, "self.finish_requests(scheduler_output)"),
    "remove_request": (758, "req_idx = self.req_states.remove_request(req_id)"),
    "add_requests": (1164, "self.add_requests(scheduler_output)"),
    "add_request": (804, "self.req_states.add_request("),
    "append_new": (818, "req_index, new_req_data.block_ids, overwrite=True"),
    "apply_req_states": (833, "self.req_states.apply_staged_writes()"),
    "update_requests": (1165, "self.update_requests(scheduler_output)"),
    "num_computed_np": (846, "num_computed_tokens_np[req_index] = num_computed_tokens"),
    "append_cached": (849, "req_index, req_new_block_ids, overwrite=False"),
    "prefill_mirror": (854, "self.req_states.num_computed_tokens_np,"),
    "apply_staged_writes": (1166, "self.block_tables.apply_staged_writes()"),
    "prepare_inputs": (1211, "input_batch = self.prepare_inputs(scheduler_output, batch_desc)"),
    "idx_mapping": (897, "idx_mapping = async_copy_to_gpu(idx_mapping_np, device=self.device)"),
    "cu_arange": (907, "cu_num_logits = torch.arange("),
    "expanded_zeros": (911, "expanded_local_pos = torch.zeros("),
    "cu_upload": (927, "cu_num_logits = async_copy_to_gpu(cu_num_logits_np, device=self.device)"),
    "expand": (930, "expanded_idx_mapping, expanded_local_pos = expand_idx_mapping("),
    "num_reqs_padded": (936, "num_reqs_padded = batch_desc.num_reqs or num_reqs"),
    "qsl": (937, "query_start_loc_np = np.empty(self.max_num_reqs + 1, dtype=np.int32)"),
    "qsl_upload": (943, "async_copy_to_gpu(query_start_loc_np, out=self.input_buffers.query_start_loc)"),
    "is_prefilling": (946, "prefill_len_np = self.req_states.prefill_len.np[idx_mapping_np]"),
    "prefill": (953, "prepare_prefill_inputs("),
    "pos_seq_lens": (964, "prepare_pos_seq_lens("),
    "combine": (988, "logits_indices = combine_sampled_and_draft_tokens("),
    "prepare_attn": (1212, "block_tables, slot_mappings = self.prepare_attn(input_batch)"),
    "gather": (1062, "block_tables = self.block_tables.gather_block_tables("),
    "slots": (1068, "slot_mappings = self.block_tables.compute_slot_mappings("),
}

def fetch(carry: Path, wheel: str | None) -> int:
    """Extracts FILES from the vLLM wheel into carry/."""
    tmp = None
    if wheel is None:
        tmp = tempfile.mkdtemp(prefix="vllm-wheel-")
        cmd = [sys.executable, "-m", "pip", "download", f"vllm=={VERSION}", "--no-deps", "--only-binary=:all:", "-d", tmp]
        print("vllm-prep-oracle:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        wheel = str(next(Path(tmp).glob("vllm-*.whl")))
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for f in FILES:
            if f not in names:
                print(f"vllm-prep-oracle: {f} is not in {wheel}")
                return 1
            dst = carry / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(z.read(f))
        version = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        (carry / "VERSION").write_text((re.search(r"(?m)^Version: (\S+)", z.read(version).decode()).group(1)
                                        if version else "?") + "\n")
    print(f"vllm-prep-oracle: {len(FILES)} files of {Path(wheel).name} in {carry}")
    return 0


# ---- vLLM's modules, unchanged but for their import lines ----------------------------------------


def defined_name(node: ast.stmt) -> str | None:
    """The name a top-level statement defines (a function, class or assignment), if one."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign):
        return next((t.id for t in node.targets if isinstance(t, ast.Name)), None)
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def extract(path: Path, names: list[str], env: dict) -> dict:
    """The top-level definitions `names` of vLLM's file, executed alone in `env`: vLLM's own
    source, without the rest of its module."""
    keep = [node for node in ast.parse(path.read_text()).body if defined_name(node) in names]
    missing = set(names) - {defined_name(node) for node in keep}
    if missing:
        raise SystemExit(f"vllm-prep-oracle: {path}: {sorted(missing)} not found")
    ns = dict(env)
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), ns)
    return {k: ns[k] for k in names}


def load_vllm(carry: Path, cpu: bool):
    """vLLM's buffer_utils, input_batch, block_table and states modules from carry/."""
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    import ferry_vllm

    v = carry / "vllm"
    pin = not cpu  # vLLM: PIN_MEMORY = is_pin_memory_available()
    shim = types.ModuleType("_vllm_oracle_shim")
    shim.triton, shim.tl = triton, tl
    shim.__dict__.update(extract(v / "v1/attention/backends/utils.py", ["PAD_SLOT_ID"], {}))
    shim.__dict__.update(extract(v / "utils/__init__.py", ["MASK_64_BITS", "random_uuid"], {"uuid": __import__("uuid")}))
    if cpu:  # vLLM's CPU worker's patches (v1/worker/cpu/shm.py:20-22, 57, 63-73)
        cpu_worker = extract(v / "v1/worker/cpu/shm.py", ["fake_pin_memory", "async_tensor_h2d"],
                             {"np": np, "torch": torch, "Any": object})
        torch.Tensor.pin_memory = cpu_worker["fake_pin_memory"]
        shim.async_tensor_h2d = cpu_worker["async_tensor_h2d"]
    else:
        shim.__dict__.update(extract(v / "utils/torch_utils.py", ["async_tensor_h2d"],
                                     {"np": np, "torch": torch, "PIN_MEMORY": pin}))
    shim.is_uva_available = lambda: True
    shim.get_accelerator_view_from_cpu_tensor = ferry_vllm.get_accelerator_view_from_cpu_tensor
    sys.modules[shim.__name__] = shim

    loaded = {}
    rewritten = 0

    def load(rel: str, name: str):
        nonlocal rewritten
        text = (v / rel).read_text()

        def from_import(m: re.Match) -> str:
            nonlocal rewritten
            rewritten += 1
            module, names = m.group(2), m.group(3)
            target = loaded.get(module)
            return f"{m.group(1)}from {target.__name__ if target else shim.__name__} import {names}"

        text = re.sub(r"(?m)^([ \t]*)from (vllm(?:\.[\w.]+)?) import (\([^)]*\)|[^\n#]+)", from_import, text)
        spec = importlib.util.spec_from_loader(name, loader=None)
        mod = importlib.util.module_from_spec(spec)
        mod.__file__ = str(v / rel)  # Triton reads a kernel's source through its module's file
        sys.modules[name] = mod
        exec(compile(text, str(v / rel), "exec"), mod.__dict__)
        loaded["vllm." + rel[:-3].replace("/", ".")] = mod
        return mod

    buffer_utils = load("v1/worker/gpu/buffer_utils.py", "_vllm_buffer_utils")
    if cpu:  # vLLM's CPU worker: gpu_buffer_utils.UvaBuffer = cpu_buffer_utils.UvaBuffer (cpu/shm.py)
        buffer_utils.UvaBuffer = load("v1/worker/cpu/buffer_utils.py", "_vllm_cpu_buffer_utils").UvaBuffer
    input_batch = load("v1/worker/gpu/input_batch.py", "_vllm_input_batch")
    block_table = load("v1/worker/gpu/block_table.py", "_vllm_block_table")
    states = load("v1/worker/gpu/states.py", "_vllm_states")
    return types.SimpleNamespace(buffer_utils=buffer_utils, input_batch=input_batch, block_table=block_table,
                                 states=states, import_lines_rewritten=rewritten)


def check_citations(carry: Path) -> None:
    lines = (carry / "vllm/v1/worker/gpu/model_runner.py").read_text().splitlines()
    for what, (line, text) in CITED.items():
        if text not in lines[line - 1]:
            raise SystemExit(f"vllm-prep-oracle: model_runner.py:{line} is not `{text}` ({what}): another vLLM than "
                             f"{VERSION}? (.carry/vllm/VERSION)")


# ---- vLLM's model runner, its calls in order -----------------------------------------------------


class VllmRunner:
    """The parts of vLLM's GPUModelRunner that prepare a step, over vLLM's own objects; each call
    as model_runner.py makes it (cited by line)."""

    def __init__(self, vllm, *, max_num_reqs, max_num_tokens, block_sizes, kernel_block_sizes, max_num_blocks,
                 num_spec, device):
        import torch

        self.v, self.device = vllm, device
        self.max_num_reqs = max_num_reqs
        self.decode_query_len = num_spec + 1
        max_model_len = max(m * b for m, b in zip(max_num_blocks, block_sizes))
        self.req_states = vllm.states.RequestState(max_num_reqs, max_model_len, max_num_tokens, num_spec,
                                                   vocab_size=150_000, device=device)
        self.block_tables = vllm.block_table.BlockTables(block_sizes, max_num_reqs, max_num_tokens, max_num_blocks,
                                                         device, kernel_block_sizes)
        self.input_buffers = vllm.input_batch.InputBuffers(max_num_reqs, max_num_tokens, device)
        self.torch = torch

    def lifecycle(self, s, ids: dict[int, str]) -> None:
        """The step's requests: finished, new, and the host counts of the running ones (everything
        of the step's updates but the block appends, which prepare() makes). ids: request slot ->
        vLLM request id."""
        import numpy as np

        rs, bt = self.req_states, self.block_tables
        # finish_requests (model_runner.py:1162): _remove_request -> req_states.remove_request (:758)
        for slot in s.removed:
            assert rs.remove_request(ids.pop(slot)) == slot
        # add_requests (:1164): req_states.add_request (:804), append_block_ids(overwrite=True) (:818),
        # req_states.apply_staged_writes (:833)
        for slot, tokens, block_ids, computed in s.added:
            req_id = f"req-{slot}-{time.monotonic_ns()}"
            rs.add_request(req_id=req_id, prompt_len=len(tokens), all_token_ids=tokens.tolist(),
                           num_computed_tokens=computed, max_tokens=1)
            assert rs.req_id_to_index[req_id] == slot, "vLLM took another slot than the trace"
            ids[slot] = req_id
            bt.append_block_ids(slot, block_ids, overwrite=True)
        if s.added:
            rs.apply_staged_writes()
        # update_requests (:1165): num_computed_tokens_np from the scheduler for each scheduled
        # request that was running (:846; its block appends, :849, are prepare()'s: the loop's
        # two effects are independent), then the host's count of computed prefill tokens (:853-857)
        added = {a[0] for a in s.added}
        for i, slot in enumerate(s.idx_mapping.tolist()):
            if slot not in added:
                rs.num_computed_tokens_np[slot] = s.num_computed[i]
        np.minimum(rs.num_computed_tokens_np, rs.prefill_len.np, out=rs.num_computed_prefill_tokens)

    def prepare(self, s):
        """The step's block appends, block_tables.apply_staged_writes, prepare_inputs and
        prepare_attn, from the scheduler's arrays: the GPU inputs of the step. Returns what
        prepare_inputs and prepare_attn give."""
        import numpy as np

        torch, rs, bt = self.torch, self.req_states, self.block_tables
        ib = self.v.input_batch
        # update_requests's appends (:849), then block_tables.apply_staged_writes (:1166)
        for slot, block_ids in s.new_block_ids:
            bt.append_block_ids(slot, block_ids, overwrite=False)
        bt.apply_staged_writes()

        # prepare_inputs (:874-1053), from the arrays it builds at :891-896 on
        num_reqs, num_tokens = s.num_reqs, s.num_tokens
        idx_mapping_np = s.idx_mapping
        num_scheduled_tokens = s.num_scheduled_tokens
        idx_mapping = self.v.buffer_utils.async_copy_to_gpu(idx_mapping_np, device=self.device)  # :897
        if s.num_draft_tokens is None:  # :902-913
            total_num_logits = num_reqs
            cu_num_logits = torch.arange(num_reqs + 1, device=self.device, dtype=torch.int32)
            expanded_idx_mapping = idx_mapping
            expanded_local_pos = torch.zeros(num_reqs, dtype=torch.int32, device=self.device)
        else:  # :914-932
            num_draft_tokens_per_req = s.num_draft_tokens
            num_bonus_tokens = 1  # model_state.num_new_sampled_tokens_per_step
            total_num_draft_tokens = int(num_draft_tokens_per_req.sum())
            total_num_logits = num_reqs * num_bonus_tokens + total_num_draft_tokens
            num_logits = num_draft_tokens_per_req + num_bonus_tokens
            cu_num_logits_np = np.empty(num_reqs + 1, dtype=np.int32)
            cu_num_logits_np[0] = 0
            np.cumsum(num_logits, out=cu_num_logits_np[1:])
            cu_num_logits = self.v.buffer_utils.async_copy_to_gpu(cu_num_logits_np, device=self.device)
            expanded_idx_mapping, expanded_local_pos = ib.expand_idx_mapping(
                idx_mapping, total_num_logits, cu_num_logits, self.decode_query_len)
        num_reqs_padded = s.num_reqs_padded  # :936 (batch_desc.num_reqs)
        query_start_loc_np = np.empty(self.max_num_reqs + 1, dtype=np.int32)  # :937-945
        query_start_loc_np[0] = 0
        np.cumsum(num_scheduled_tokens, out=query_start_loc_np[1 : num_reqs + 1])
        query_start_loc_np[num_reqs + 1 :] = num_tokens
        self.v.buffer_utils.async_copy_to_gpu(query_start_loc_np, out=self.input_buffers.query_start_loc)
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs_padded + 1]
        prefill_len_np = rs.prefill_len.np[idx_mapping_np]  # :946-949
        num_computed_prefill_tokens_np = rs.num_computed_prefill_tokens[idx_mapping_np]
        is_prefilling_np = num_computed_prefill_tokens_np < prefill_len_np
        if np.any(is_prefilling_np):  # :952-961
            ib.prepare_prefill_inputs(self.input_buffers.input_ids, rs.next_prefill_tokens, idx_mapping,
                                      query_start_loc, rs.all_token_ids.gpu, rs.prefill_len.gpu,
                                      rs.num_computed_tokens.gpu)
        ib.prepare_pos_seq_lens(idx_mapping, query_start_loc, rs.num_computed_tokens.gpu,  # :964-970
                                self.input_buffers.positions, self.input_buffers.seq_lens)
        seq_lens = self.input_buffers.seq_lens[:num_reqs_padded]
        logits_indices = ib.combine_sampled_and_draft_tokens(  # :988-999
            self.input_buffers.input_ids, idx_mapping, rs.last_sampled_tokens, query_start_loc, seq_lens,
            rs.prefill_len.gpu, rs.draft_tokens, cu_num_logits, total_num_logits, 1)
        # prepare_attn (:1055-1074)
        block_tables = bt.gather_block_tables(idx_mapping, num_reqs_padded=num_reqs_padded)
        slot_mappings = bt.compute_slot_mappings(idx_mapping, query_start_loc, self.input_buffers.positions,
                                                 num_tokens_padded=s.num_tokens_padded)
        return dict(idx_mapping=idx_mapping, cu_num_logits=cu_num_logits, logits_indices=logits_indices,
                    expanded_idx_mapping=expanded_idx_mapping, expanded_local_pos=expanded_local_pos,
                    query_start_loc=query_start_loc, seq_lens=seq_lens, block_tables=block_tables,
                    slot_mappings=slot_mappings, is_prefilling=is_prefilling_np)


