"""`python -m bench.gpu_probe`: every CUDA claim of DESIGN.md section 10 measured in one run, under five minutes.

In process, torch only (no TorchServe, no Java): a real CUDA out-of-memory error inside a
TorchScript model splits the chunk and recovers, a frame too large alone gets 507; no host sync
in the forward (`torch.cuda.set_sync_debug_mode("error")`); pinned staging and copy overlapping
compute; peak device memory per chunk against the budget; 720p JPEG frames/s with CPU decode at
2, 8 and all threads and with nvJPEG; NVDEC 1080p H.264 frames/s with 1 and 7 segments in flight,
frames kept on the device; a worker on a non-zero GPU index touching no other GPU.

    python -m bench.gpu_probe                    # on the GPU host: table, JSON to $OUT/gpu_probe.json
    python -m bench.gpu_probe --dry-run          # tiny, CPU allowed: proves every section's code runs
    python -m bench.gpu_probe --only jpeg --only nvdec --seconds 60

A bare CUDA host has torch, torchvision, numpy, Pillow and PyYAML but not PyAV or simplejpeg:
`bash bench/gpu_probe/prepare.sh` (here, with the package registry) downloads their cp312 wheels
into `.whl/` and prints the one device command that installs them and runs the probe
(docs/gpu.md). Sections: `bench.gpu_probe.core` (OOM, syncs, staging, memory, GPU index) and
`bench.gpu_probe.decode` (JPEG, NVDEC); the framework is `bench.gpu_probe.probe`.
"""
