"""Training engines over the ranks of a torchrun job: FSDP2 and the rank-0 front."""
