"""What a batch holds, by name: the contract between the input pipeline
(which writes it), the encoder, the train and eval steps and the export
(which read it), in either layout. No TensorFlow.

One example a row (fixed shapes, length buckets), [batch, length]:

    input_word_ids, input_mask, input_type_ids   int32 (`ENCODER_INPUTS`,
                                                 TF Hub's interface)

Shared rows (`trainer.foundation.shared_rows`), [rows, seq_length] per
token and [rows, slots] per example slot (`ROW_INPUTS`):

    input_word_ids, input_type_ids   int32, as packed
    input_example_ids                int32: 1 + the token's example's slot
                                     in the row, 0 for padding (attention
                                     stays within one example); the
                                     fixed-shape `input_mask` is its
                                     one-example case, so rows carry no mask
    input_position_ids               int32: from 0 at each example's [CLS]
    input_example_starts             int32 [rows, slots]: where each slot's
                                     example starts ([CLS])
    input_example_index              int32 [rows, slots]: each slot's
                                     example's place in the batch (0 for an
                                     empty slot): the key of its dropout
                                     masks (`encoders.dropout`)

Beside the encoder's inputs a batch carries what its loss and metrics read:
`label` (int32, float32 for regression) and `weight` (float32: 1 for an
example, 0 for eval padding or an empty slot), and `meta` on a group.
Every other feature is per example ([batch], in rows [rows, slots]) or per
token ([batch, length], in rows [rows, seq_length]) and is moved by the
pipeline by that rank alone (`row_layout.to_rows`), so a new feature is a
name written where it is made and read where it is used.
"""

ENCODER_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")
ROW_INPUTS = ("input_word_ids", "input_type_ids", "input_example_ids",
              "input_position_ids", "input_example_starts",
              "input_example_index")
# What shared rows drop from a packed example: implied by input_example_ids.
IMPLIED_IN_ROWS = ("input_mask",)
# The key whose presence marks a batch in shared rows.
ROWS_KEY = "input_example_ids"


def is_rows(features):
  """Whether `features` (a dict, or a dataset's element spec) are laid out
  in shared rows, else one example a row."""
  return ROWS_KEY in features


def encoder_inputs(features):
  """The encoder's inputs among a batch's `features`: TF Hub's three (a TF
  Hub encoder rejects extras), or those of shared rows."""
  keys = ROW_INPUTS if is_rows(features) else ENCODER_INPUTS
  return {k: features[k] for k in keys}
