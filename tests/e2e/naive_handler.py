"""A stock-style handler, as the seed article's service had it: a static input buffer sized for
the model's batch of 16 at 720p, per-frame decode to float, and `torch.stack` to collate."""

import io
import json

import numpy as np
import torch
from PIL import Image
from ts.torch_handler.base_handler import BaseHandler


class NaiveFrameHandler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        self.buffer = torch.empty(16, 3, 720, 1280)

    def preprocess(self, data):
        frames = []
        for row in data:
            image = Image.open(io.BytesIO(row.get("body") or row.get("data"))).convert("RGB")
            frames.append(torch.from_numpy(np.asarray(image)).permute(2, 0, 1).float())
        batch = torch.stack(frames)
        self.buffer[: batch.shape[0]] = batch
        return self.buffer[: batch.shape[0]]

    def inference(self, data, *args, **kwargs):
        sizes = torch.tensor([list(data.shape[2:])] * data.shape[0])
        return self.model(data, sizes)

    def postprocess(self, data):
        return [json.dumps({k: float(v[i]) for k, v in data.items()}) for i in range(len(data["brightness"]))]
