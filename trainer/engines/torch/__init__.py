"""PyTorch engines: inference (μ) and training (π_θ) on transformers."""
