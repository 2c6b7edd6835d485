"""A lenient verifier for loop tests: an untrained tiny model earns it often enough that
groups have non-zero advantages, so the updates really move θ (exact match would not)."""


def starts_with_digit(response: str, answer: str) -> bool:
    return response[:1].isdigit()
