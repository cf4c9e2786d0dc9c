"""The real-time clock's period-error figures: counts in bins, read while the loop runs."""

import numpy as np

from robolearn.clock import ErrorHistogram, RealClock


def test_histogram_quantiles_are_never_below_numpys_and_at_most_one_bin_above():
    rng = np.random.default_rng(3)
    # most ticks on time, a tail of late ones, and a few past the histogram's range (a tick that took 0.4 s)
    values = np.concatenate([rng.exponential(1e-4, 20_000), rng.uniform(2e-3, 3e-2, 300), [0.25, 0.4]])
    rng.shuffle(values)
    hist = ErrorHistogram(resolution_s=1e-5, limit_s=0.2)
    for v in values:
        hist.add(float(v))
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999):
        # numpy's quantile interpolates between two sorted values; the histogram's bin holds the upper one
        linear, upper = float(np.quantile(values, q)), float(np.quantile(values, q, method="higher"))
        assert linear <= hist.quantile(q) <= upper + 1e-5 + 1e-12, q
    assert hist.quantile(1.0) == values.max()
    # a quantile among values past the range (a start-up tick of 1.5 s) is the largest, never the range's end
    slow_start = ErrorHistogram(resolution_s=1e-5, limit_s=0.2)
    for v in [1e-3] * 19 + [1.5]:
        slow_start.add(v)
    assert slow_start.quantile(0.99) == 1.5 >= float(np.quantile([1e-3] * 19 + [1.5], 0.99))
    assert ErrorHistogram().quantile(0.99) == 0.0


def test_the_clock_reports_its_ticks_period_errors_in_order():
    clock = RealClock(1000.0)
    for _ in range(20):
        clock.wait()
    assert 0.0 <= clock.period_error_ms(0.5) <= clock.period_error_ms(0.99) <= clock.period_error_ms(1.0)
    assert clock.period_errors.total == 20
