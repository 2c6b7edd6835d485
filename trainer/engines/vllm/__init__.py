"""The vLLM inference engine, CPU and GPU."""
