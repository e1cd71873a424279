"""Fault injection for reliability tests and drills (off unless set).

BERT_TRAINER_FAULT_NAN_BATCHES="12,40": the training loop that consumes one
of these batch positions of the data stream reports a NaN loss, as a
diverging step would. `wrap` puts that around a run's trainer at set-up, so
a test (or an operator's drill) exercises the rollback of a real run end to
end while the loop itself knows nothing of it.
"""

import dataclasses
import os

NAN_BATCHES = "BERT_TRAINER_FAULT_NAN_BATCHES"


def nan_positions(environ=None):
  """The batch positions of BERT_TRAINER_FAULT_NAN_BATCHES."""
  spec = (os.environ if environ is None else environ).get(NAN_BATCHES, "")
  return frozenset(int(p) for p in spec.split(",") if p.strip())


class NanAt:
  """A trainer whose loops that consume one of `positions` report a NaN
  loss (the weights are trained as usual)."""

  def __init__(self, trainer, positions):
    self._trainer, self.positions = trainer, frozenset(positions)

  def __getattr__(self, name):
    return getattr(self._trainer, name)

  def train(self, num_steps):
    output = self._trainer.train(num_steps)
    if any(output.position <= p < output.end_position for p in self.positions):
      output = dataclasses.replace(output, loss=float("nan"))
    return output


def wrap(trainer, environ=None):
  """`trainer`, with NaNs injected where the environment asks for them."""
  positions = nan_positions(environ)
  return NanAt(trainer, positions) if positions else trainer
