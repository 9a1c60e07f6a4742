"""The ways in to gpu-credits: the command line (`cli`), the HTTP service (`service`) with
its web audit view (`web`), the simulator (`sim`) and the benchmarks (`bench`)."""
