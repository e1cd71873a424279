"""Fault injection for reliability tests and drills (off unless set).

BERT_TRAINER_FAULT_NAN_BATCHES="12,40": the training loop that consumes one
of these batch positions of the data stream reports a NaN loss, as a
diverging step would. Lets a test (or an operator's drill) exercise the
rollback path of a real run end to end.
"""

import os


def _positions():
  spec = os.environ.get("BERT_TRAINER_FAULT_NAN_BATCHES", "")
  return {int(p) for p in spec.split(",") if p.strip()}


def nan_in(first, end):
  """Whether a NaN is injected for batches [first, end)."""
  return any(first <= p < end for p in _positions())
