# Builds ferry_vllm._C against the installed torch with torch.utils.cpp_extension. Every build holds
# ferry's host backend (device="cpu"); where torch has CUDA and nvcc is found, the build is a
# CUDAExtension that also holds ferry's CUDA backend (device="cuda"), its kernels built by nvcc.
# FERRY_VLLM_BACKEND=host builds the host backend alone, =cuda requires the CUDA build; FERRY_ROOT
# names the ferry tree (default: the folder above this one); TORCH_CUDA_ARCH_LIST defaults to 9.0.
#
# The version's local label says which backends the build holds ("0.1.0+cpu",
# "0.1.0+cpu.cu132"): pip prints it without -v, in the wheel's file name and in "Successfully
# installed ferry-vllm-...". ferry_vllm.__version__ and ferry_vllm.backends say it at run time.
import os
import sys
from pathlib import Path

from setuptools import setup

VERSION = "0.1.0"
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

label = "cpu"
if use_cuda:
    label += ".cu" + torch.version.cuda.replace(".", "")
    summary = (f"device='cpu' on ferry's host backend and device='cuda' on its CUDA backend (torch's CUDA "
               f"{torch.version.cuda}, {nvcc}, TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '9.0')})")
else:
    why = "FERRY_VLLM_BACKEND=host" if backend == "host" else (
        "torch has no CUDA" if torch.version.cuda is None else f"nvcc not found at {nvcc}")
    summary = f"device='cpu' on ferry's host backend only ({why}; device='cuda' needs the CUDA build)"
version = f"{VERSION}+{label}"
torch_version = torch.__version__.split("+")[0]
print(f"ferry-vllm {version}: {summary}; built against torch {torch.__version__}", file=sys.stderr)

includes = [str(root / "include"), str(root / "policies"), str(HERE / "csrc")]
# The version and the torch it was built against reach the module as tokens it stringifies.
info = [f"-DFERRY_VLLM_VERSION={version}", f"-DFERRY_VLLM_TORCH={torch_version}"]
cxx = ["-std=c++20", "-O2", "-g0", "-fvisibility=hidden"]  # -g0: no debug info (Python's CFLAGS ask -g)
sources = ["csrc/module.cpp", "csrc/prep.cpp", "csrc/values.cpp"]
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
        sources + ["csrc/apply.cu"],
        include_dirs=includes,
        extra_compile_args={"cxx": cxx + defines + info, "nvcc": ["-std=c++20", "-O2", "-Xcompiler=-g0"] + defines},
    )
else:
    defines = ["-DFERRY_DEFAULT_BACKEND=host", "-DFERRY_HAS_CUDA=0", "-DFERRY_HAS_MDSPAN=0"]
    ext = cpp_extension.CppExtension(
        "ferry_vllm._C",
        sources + ["csrc/apply_host.cpp"],
        include_dirs=includes,
        extra_compile_args={"cxx": cxx + defines + info},
        extra_link_args=["-pthread"],
    )

setup(
    version=version,
    packages=["ferry_vllm"],
    package_data={"ferry_vllm": ["py.typed", "*.pyi"]},
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
)
