# Builds ferry_vllm._C against the installed torch with torch.utils.cpp_extension: a CUDAExtension
# (ferry's CUDA backend, kernels built by nvcc) when torch has CUDA and nvcc is found, else a
# CppExtension on ferry's host backend. FERRY_VLLM_BACKEND=host|cuda forces one; FERRY_ROOT names
# the ferry tree (default: the folder above this one); TORCH_CUDA_ARCH_LIST defaults to 9.0.
import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def fail(message: str) -> None:
    sys.exit(f"ferry-vllm: {message}")


try:
    import torch
    from torch.utils import cpp_extension
except ImportError:
    fail(
        "torch is not importable: install torch first, then build against it with "
        "`pip install --no-build-isolation ./python`"
    )

root = Path(os.environ.get("FERRY_ROOT", HERE.parent)).resolve()
if not (root / "include" / "ferry" / "ferry.hpp").is_file():
    fail(f"ferry's headers are not under {root}/include: set FERRY_ROOT to the ferry tree")

backend = os.environ.get("FERRY_VLLM_BACKEND", "")
nvcc = Path(cpp_extension.CUDA_HOME or "/nonexistent") / "bin" / "nvcc"
has_cuda = torch.version.cuda is not None and nvcc.is_file()
if backend == "cuda" and not has_cuda:
    fail(
        "FERRY_VLLM_BACKEND=cuda needs a torch built with CUDA "
        f"(torch.version.cuda = {torch.version.cuda}) and nvcc (looked at {nvcc})"
    )
if backend not in ("", "cuda", "host"):
    fail(f"FERRY_VLLM_BACKEND must be cuda or host, got {backend!r}")
use_cuda = backend == "cuda" or (backend == "" and has_cuda)
if not use_cuda:
    why = "FERRY_VLLM_BACKEND=host" if backend == "host" else (
        "torch has no CUDA" if torch.version.cuda is None else f"nvcc not found at {nvcc}")
    print(
        f"ferry-vllm: building on ferry's host backend ({why}): every tensor it hands out is a CPU "
        "tensor; FERRY_VLLM_BACKEND=cuda requires the CUDA build",
        file=sys.stderr,
    )

includes = [str(root / "include"), str(root / "policies"), str(HERE / "csrc")]
cxx = ["-std=c++20", "-O2", "-fvisibility=hidden"]
if use_cuda:
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    cuda_include = Path(cpp_extension.CUDA_HOME) / "include"
    mdspan = 0
    for cand in (cuda_include / "cccl", cuda_include):
        if (cand / "cuda" / "std" / "mdspan").is_file():
            mdspan = 1
            if cand != cuda_include:
                cxx += ["-isystem", str(cand)]  # CUDA 13 keeps CCCL in include/cccl
            break
    defines = ["-DFERRY_DEFAULT_BACKEND=cuda", "-DFERRY_HAS_CUDA=1", f"-DFERRY_HAS_MDSPAN={mdspan}"]
    ext = cpp_extension.CUDAExtension(
        "ferry_vllm._C",
        ["csrc/module.cpp", "csrc/values.cpp", "csrc/apply.cu"],
        include_dirs=includes,
        extra_compile_args={"cxx": cxx + defines, "nvcc": ["-std=c++20", "-O2"] + defines},
    )
else:
    defines = ["-DFERRY_DEFAULT_BACKEND=host", "-DFERRY_HAS_CUDA=0", "-DFERRY_HAS_MDSPAN=0"]
    ext = cpp_extension.CppExtension(
        "ferry_vllm._C",
        ["csrc/module.cpp", "csrc/values.cpp", "csrc/apply_host.cpp"],
        include_dirs=includes,
        extra_compile_args={"cxx": cxx + defines},
        extra_link_args=["-pthread"],
    )

setup(
    packages=["ferry_vllm"],
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
)
