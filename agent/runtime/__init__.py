"""Below everything else: the facade over the native runner, NVRTC compilation in its own sandboxed process with a cache, the CUBIN and machine-code audits, child-process hygiene."""
