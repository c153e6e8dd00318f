# The device fixture: every test that takes `device` runs once per backend the build can serve
# here — device="cpu" (ferry's host backend, every build) and device="cuda" (ferry's CUDA backend:
# a CUDA build on a machine with a GPU; skipped, with the reason, elsewhere).
import pytest
import torch

import ferry_vllm as fv

GPU = fv.CUDA and torch.cuda.is_available()
NO_GPU = ("no CUDA device here" if fv.CUDA else "a host-only build (" + fv.__version__ + ")") + \
    ": the device='cuda' half runs where the CUDA build meets a GPU"


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not GPU, reason=NO_GPU))])
def device(request):
    return request.param
