import unittest

from stats import mean, median, percentile


class StatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_median_odd(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_median_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_percentile_ends(self):
        self.assertEqual(percentile([5, 1, 3], 0), 1)
        self.assertEqual(percentile([5, 1, 3], 100), 5)

    def test_percentile_middle(self):
        self.assertEqual(percentile([10, 20, 30, 40, 50], 50), 30)


if __name__ == "__main__":
    unittest.main()
