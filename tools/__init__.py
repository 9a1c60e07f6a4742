"""The gpu-credits command line (and later the HTTP service), and benchmarks."""
