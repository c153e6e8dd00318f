# examples/async_decode/async_decode.py (the C++ example's loop over ferry_vllm.StepBatch: gathers
# with host rows, staged writes, the decode epilogue, a sampler on the same stream) runs and checks
# itself against its NumPy reference, on each device the build serves here.
import importlib.util
import pathlib
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "async_decode" / "async_decode.py"


def load():
    spec = importlib.util.spec_from_file_location("async_decode_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_example_checks_itself(device, capsys):
    assert load().main(["--steps", "300", "--check", "8", "--device", device]) == 0
    out = capsys.readouterr().out
    assert "check: 38 read-backs over 300 steps equal to the NumPy reference" in out, out


def test_the_example_fails_on_a_wrong_reference(capsys):
    # The check can fail: a reference whose slot mapping is one slot off is caught at the first
    # read-back.
    ex = load()

    class OffByOne(ex.Reference):
        def slot_of(self, r, pos):
            return super().slot_of(r, pos) + 1

    ex.Reference = OffByOne
    assert ex.run("cpu", 16, 8, 1) == 1
    assert "MISMATCH after step 7: slot_mapping[0]" in capsys.readouterr().out
