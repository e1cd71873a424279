"""The statistics of a recipe sweep: mean, standard deviation, standard
error of the mean, and the paired difference against a baseline row with
its 95% Student-t interval, over repetitions (seeds or folds).

Pure Python, no TensorFlow: benchmarks/recipe_sweep.py prints them and the
tests check them against hand-worked values.
"""

import dataclasses
import math

# Two-sided 95% quantiles of Student's t, t_{0.975, df}, df = 1..30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


def t975(df):
  """t_{0.975, df}: the table to 30 degrees of freedom, then the
  Cornish-Fisher expansion around the normal quantile (error < 1e-3)."""
  if df < 1:
    raise ValueError(f"t quantile needs df >= 1, got {df}")
  if df <= len(_T975):
    return _T975[df - 1]
  z = _Z975
  return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) /
          (96 * df**2))


@dataclasses.dataclass(frozen=True)
class Summary:
  """n values: their mean, sample standard deviation (n - 1) and standard
  error of the mean (sd / sqrt(n)); sd and sem are NaN for one value."""

  n: int
  mean: float
  sd: float
  sem: float


def summarize(values):
  values = [float(v) for v in values]
  n = len(values)
  if not n:
    raise ValueError("summarize needs at least one value")
  mean = sum(values) / n
  if n == 1:
    return Summary(1, mean, math.nan, math.nan)
  sd = math.sqrt(sum((v - mean)**2 for v in values) / (n - 1))
  return Summary(n, mean, sd, sd / math.sqrt(n))


@dataclasses.dataclass(frozen=True)
class Paired:
  """The differences row - baseline over the repetitions both ran: their
  Summary and the 95% interval mean +- t_{0.975, n-1} x sem (NaN for one
  pair)."""

  diff: Summary
  low: float
  high: float

  @property
  def half_width(self):
    return (self.high - self.low) / 2


def paired(row, baseline, test_train=0.0):
  """`row` and `baseline`: {repetition: value}; pairs on the repetitions
  both hold. Returns a Paired, or None when they share none.

  `test_train` > 0 (held-out / training examples, for folds of one data
  set) widens the interval for the training data the folds share, which
  makes their differences correlated: the variance of the mean difference
  is taken as sd^2 x (1/n + test_train) instead of sd^2 / n, the corrected
  resampled t of Nadeau & Bengio (2003), made for random splits and a
  heuristic for folds."""
  shared = sorted(set(row) & set(baseline))
  if not shared:
    return None
  diff = summarize([row[k] - baseline[k] for k in shared])
  if diff.n == 1:
    return Paired(diff, math.nan, math.nan)
  half = t975(diff.n - 1) * diff.sd * math.sqrt(1 / diff.n + test_train)
  return Paired(diff, diff.mean - half, diff.mean + half)
