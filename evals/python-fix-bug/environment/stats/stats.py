"""Small statistics helpers."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]


def percentile(values, p):
    """The p-th percentile (0..100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    rank = p / 100 * len(ordered)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
