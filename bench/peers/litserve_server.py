"""LitServe 0.2 serving the frame model the way our handler does (`bench.peers.core`), for
`python -m bench.engines`.

    .venv-litserve/bin/python -m bench.peers.litserve_server MODEL.pt --port PORT

Requests are `POST /predict` with a multipart form whose `data` part is one JPEG (LitServe
refuses raw bodies: a non-form request is parsed as JSON). LitServe batches them (`max_batch_size`,
`batch_timeout`, the counterparts of TorchServe's `batchSize` and `maxBatchDelay`) for one
inference worker process; the answer is the frame's JSON. Loopback only.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import litserve as ls

from bench.peers.core import FrameModel


class FrameAPI(ls.LitAPI):
    """LitServe's six hooks around `FrameModel`: the form's file in, one JSON answer out."""

    def __init__(self, model_path: str, max_batch: int, decode_threads: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model_path, self.max_batch, self.decode_threads = model_path, max_batch, decode_threads

    def setup(self, device: str) -> None:
        self.model = FrameModel(self.model_path, self.decode_threads, self.max_batch)

    def decode_request(self, request) -> bytes:
        part = request["data"]
        return part.file.read() if hasattr(part, "file") else bytes(part)

    def batch(self, inputs: Sequence[bytes]) -> list[bytes]:
        return list(inputs)

    def predict(self, bodies: list[bytes]) -> list[dict[str, object]]:
        return self.model(bodies)

    def unbatch(self, output: list[dict[str, object]]) -> list[dict[str, object]]:
        return output

    def encode_response(self, output: dict[str, object]) -> dict[str, object]:
        return output


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peers.litserve_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the TorchScript frame model (frame_quality.pt)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-batch-size", type=int, default=32, help="requests a batch (TorchServe's batchSize)")
    p.add_argument("--batch-timeout", type=float, default=0.05, help="seconds (TorchServe's maxBatchDelay)")
    p.add_argument("--model-max-batch", type=int, default=16, help="frames a forward (model_max_batch)")
    p.add_argument("--decode-threads", type=int, default=2)
    args = p.parse_args(argv)
    api = FrameAPI(args.model, args.model_max_batch, args.decode_threads,
                   max_batch_size=args.max_batch_size, batch_timeout=args.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1, timeout=120)
    server.run(host="127.0.0.1", port=args.port, num_api_servers=1, log_level="warning",
               generate_client_file=False)


if __name__ == "__main__":
    main()
