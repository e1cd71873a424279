"""What a user can get wrong: TensorFlow's and Python's errors of the
environment as one line."""

import errno

import tensorflow as tf

from trainer.foundation import errors


def test_errors_of_the_environment_become_one_line():
  missing = errors.translate(
      tf.errors.NotFoundError(None, None, "/data/x.csv; No such file"))
  assert str(missing) == ("not found: /data/x.csv; No such file; check the "
                          "path")
  full = errors.translate(OSError(errno.ENOSPC, "No space left on device"))
  assert str(full).startswith("no room to write: ")
  assert errors.translate(KeyError("a bug of ours")) is None
  framed = tf.errors.UnavailableError(
      None, None, "Graph execution error:\n\nDetected at node x\nreal cause")
  assert "unavailable: real cause;" in str(errors.translate(framed))
