"""Inference and training engines: separate objects with separate numerics."""
