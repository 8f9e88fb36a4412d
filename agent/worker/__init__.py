"""The GPU worker process: its protocol, the GPU side (buffers, poison, checks, timing), its handle in the parent, library baselines."""
