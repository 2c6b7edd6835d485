"""The stability lab: the paper's findings at small scale, detection and speed benchmarks."""
