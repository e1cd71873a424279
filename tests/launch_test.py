"""Set-up: everything resolved once, the resume, the handles checked."""

import tensorflow as tf
import pytest

from trainer.foundation import config as config_lib
from trainer.foundation import tasks
from trainer.training import launch


def test_seq_length_above_encoder_positions(demo_paths):
  c = config_lib.Config(seq_length=129, demo_cache_dir=demo_paths["root"])
  with pytest.raises(
      config_lib.ConfigError,
      match=r"--seq_length=129 is invalid: the encoder has 128"):
    launch.load_model(c, tasks.resolve(c), tf.distribute.get_strategy())
