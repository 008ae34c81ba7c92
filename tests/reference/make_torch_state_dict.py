#!/usr/bin/env python3
"""Writes the PyTorch checkpoints that tests/test_torch_file.cpp reads without PyTorch:

  torch_state_dict.pth   torch.save of a Conv2d + BatchNorm2d + Linear state dict (f32, with the
                         OrderedDict's _metadata and num_batches_tracked), plus f64, f16, bf16,
                         i32, i64, u8 and bool tensors, a 0-d tensor, an empty one, and views that
                         share the Linear weight's storage (an offset and strides, a transpose)
  torch_state_dict.json  every tensor's dtype, shape and values (row-major, as numbers), to check
                         what kiln reads against
  torch_protocol4.pth    three of the same tensors, pickled with protocol 4
  torch_whole_model.pth  torch.save(model) of the __main__.Net above: a pickle kiln must refuse
  torch_legacy.pth       the same state dict's first tensors in the legacy (non-zip) format

Run with a python3 that has torch (Debian's):  /usr/bin/python3 tests/reference/make_torch_state_dict.py
"""
import collections
import json
import pathlib

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).flatten(1))


def main():
    torch.manual_seed(0)
    model = Net()
    # Two training steps move the running statistics and count num_batches_tracked to 2.
    for _ in range(2):
        model(torch.randn(4, 2, 4, 4))
    state = model.state_dict()
    weight = state["fc.weight"]
    state["extra.view"] = weight[1:3, 2:10:3]  # offset 14, strides (12, 3) into the weight
    state["extra.transposed"] = weight.t()
    state["extra.f64_scalar"] = torch.tensor(2.5, dtype=torch.float64)
    state["extra.f16"] = torch.randn(5).half()
    state["extra.bf16"] = torch.randn(2, 3).bfloat16()
    state["extra.i32"] = torch.tensor([[-7, 0], [2**31 - 1, -2**31]], dtype=torch.int32)
    state["extra.i64"] = torch.tensor([-3, 2**40, 7])
    state["extra.u8"] = torch.tensor([0, 200, 255], dtype=torch.uint8)
    state["extra.bool"] = torch.tensor([True, False, True])
    state["extra.empty"] = torch.zeros(0, 3)
    # An nn.Parameter pickles through torch._utils._rebuild_parameter.
    state["extra.parameter"] = nn.Parameter(torch.tensor([1.5, -2.0]))
    torch.save(state, HERE / "torch_state_dict.pth")
    # Protocol 4's opcodes (FRAME, SHORT_BINUNICODE, STACK_GLOBAL, MEMOIZE) on some of the same.
    torch.save({name: state[name] for name in ("fc.weight", "extra.view", "extra.bf16")},
               HERE / "torch_protocol4.pth", pickle_protocol=4)

    expected = collections.OrderedDict()
    for name, t in state.items():
        values = t.detach().double() if t.is_floating_point() else t.long()
        expected[name] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                          "values": values.flatten().tolist()}
    text = json.dumps({"torch_version": torch.__version__,
                       "script": "tests/reference/make_torch_state_dict.py",
                       "tensors": expected})
    (HERE / "torch_state_dict.json").write_text(text + "\n")

    torch.save(model, HERE / "torch_whole_model.pth")
    torch.save({"fc.bias": state["fc.bias"]}, HERE / "torch_legacy.pth",
               _use_new_zipfile_serialization=False)


if __name__ == "__main__":
    main()
