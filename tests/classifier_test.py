"""The handles loaded and checked, and the classifier over the encoder."""

import pytest
import tensorflow as tf

from trainer.encoders import handles
from trainer.foundation import errors


def test_a_preprocessor_without_pair_packing_is_a_clear_error(
    demo_paths, tmp_path):
  demo = tf.saved_model.load(demo_paths["preprocessor"])

  class OneSegment(tf.Module):

    def __init__(self):
      super().__init__()
      self.tokenize = demo.tokenize

    @tf.function(
        input_signature=[[tf.RaggedTensorSpec([None, None, None], tf.int32)],
                         tf.TensorSpec([], tf.int32)])
    def bert_pack_inputs(self, segments, seq_length):
      return demo.bert_pack_inputs(segments, seq_length)

  path = str(tmp_path / "one_segment")
  tf.saved_model.save(OneSegment(), path)
  with pytest.raises(errors.HandleError, match="cannot pack sentence pairs"):
    handles.check_pairs(tf.saved_model.load(path), path)
  handles.check_pairs(demo, demo_paths["preprocessor"])  # packs pairs
