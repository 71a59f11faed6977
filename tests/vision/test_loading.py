"""Programs that call torchvision's operators load in a fresh worker: the handler imports
torchvision before `torch.jit.load` / `torch.export.load` (without it, they do not)."""

from __future__ import annotations

import subprocess
import sys

import torch
import torchvision


class Suppress(torch.nn.Module):
    """Calls `torchvision::nms` on boxes made from the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0]])
        scores = x.mean() + torch.tensor([0.9, 0.8, 0.7])
        return torchvision.ops.nms(boxes, scores, 0.5)


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a new interpreter, as a TorchServe worker starts: nothing imported yet."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=str(__import__("tests.support", fromlist=["ROOT"]).ROOT))


def test_scripted_and_exported_programs_with_torchvision_ops_load(tmp_path):
    torch.jit.script(Suppress()).save(str(tmp_path / "nms.pt"))
    torch.export.save(torch.export.export(Suppress(), (torch.zeros(1, 3, 8, 8),)), str(tmp_path / "nms.pt2"))
    for name in ("nms.pt", "nms.pt2"):
        loaded = _fresh(f"import torch\nfrom handler.loading import load_model\n"
                        f"m = load_model({str(tmp_path / name)!r}, torch.device('cpu')).model\n"
                        f"print(m(torch.zeros(1, 3, 8, 8)).tolist())")
        assert loaded.returncode == 0, loaded.stderr[-2000:]
        assert loaded.stdout.strip() == "[0, 2]", name
    bare = _fresh(f"import torch\ntorch.jit.load({str(tmp_path / 'nms.pt')!r})")
    assert bare.returncode != 0 and "torchvision::nms" in bare.stderr  # what the handler's import prevents
