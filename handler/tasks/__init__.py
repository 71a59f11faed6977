"""Vision tasks (DESIGN section 12): what a chunk's model outputs become per frame.

A `Head` decides how the model is called on a chunk and turns its outputs, on the device, into
the few tensors an answer needs (one transfer per dtype), then into each frame's answer in the
frame's own pixels: `raw` (the outputs as they are), `detection`, `classification`,
`segmentation`.
"""
