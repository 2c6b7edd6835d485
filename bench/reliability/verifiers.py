"""The reward of the fault-injection runs: lenient, so that a tiny untrained model earns it
often enough for groups to have non-zero advantages (the updates really move the
weights, and a resume that is not exact shows in every later value)."""


def starts_with_digit(response: str, answer: str) -> bool:
    return response[:1].isdigit()
