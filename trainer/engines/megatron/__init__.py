"""The Megatron-core training engine, one process or a torchrun job."""
