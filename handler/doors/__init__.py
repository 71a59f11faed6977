"""The doors: each wire dialect turns a TorchServe item into a core `Request`, and the core's
outcome for it into the dialect's body and status (DESIGN sections 4, 4a and 11).

TorchServe hands the handler one dict per request and its headers; what they hold depends on the
entry point (seen with TorchServe 0.12, docs/clients.md):

- `POST /predictions/{m}` with a body: one key `body`, headers as sent plus `url_path`.
- `multipart/form-data`: one key per form field and file part, in the order sent; each part's
  own Content-Type as a per-parameter header (`''` for plain form fields).
- gRPC `Predictions`: one key per `input` entry (bytes), and no request headers at all.
- `POST /v2/models/{m}/infer` (Open Inference Protocol): one key `body` (a dict when sent as
  `application/json`), the request's headers but no `url_path`.

`handler.doors.native` serves the first three, `handler.doors.oip` the last. Each has
`read(item, headers, model, config) -> Request`, `answer(request, outcome) -> Response` and
`refuse(request, error) -> Response`; `handler.doors.route` picks the door of an item.
"""
