r"""Writes tests/data/model_garden_bert/: a tiny BERT encoder and its
preprocessor, exported by Model Garden's own TF Hub exporter
(`official.nlp.tools.export_tfhub_lib`, the code that wrote the "experts/bert"
and `bert_en_uncased_L-*` SavedModels), so the tests read the TF Hub layout
(`transformer/layer_N/...` variables, an `mlm` sub-object, the preprocessor's
`tokenize` and `bert_pack_inputs`) that no download can bring here.

Model Garden is not a dependency of this project: run this once, in a
throwaway venv, and commit what it writes (3.2 MB):

    python3 -m venv /tmp/garden && . /tmp/garden/bin/activate
    pip install -e '.[tf]' pyyaml scipy gin-config
    pip install --no-deps tf-models-no-deps==2.19.0
    python tests/data/make_model_garden_bert.py

The weights are random (seeded); the vocabulary is the demo's.
"""

import os
import shutil
import tempfile

import tensorflow as tf
import tf_keras

from official.legacy.bert import configs
from official.nlp.tools import export_tfhub_lib

from trainer.encoders import demo

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "model_garden_bert")


def main():
  tf_keras.utils.set_random_seed(7)
  if os.path.exists(OUT):
    shutil.rmtree(OUT)
  with tempfile.TemporaryDirectory() as tmp:
    vocab_file = os.path.join(tmp, "vocab.txt")
    with open(vocab_file, "w") as f:
      f.write("\n".join(demo.vocabulary()) + "\n")
    bert_config = configs.BertConfig(
        vocab_size=len(demo.vocabulary()),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_act="gelu",
        max_position_embeddings=64,
        type_vocab_size=2)
    # A pretraining checkpoint (encoder + masked-LM head) as TF-NLP writes
    # one, then the export that restores it, with the mlm sub-object.
    # pylint: disable-next=protected-access
    _, pretrainer = export_tfhub_lib._create_model(
        bert_config=bert_config, with_mlm=True)
    checkpoint = tf.train.Checkpoint(**pretrainer.checkpoint_items)
    path = checkpoint.save(os.path.join(tmp, "ckpt"))
    export_tfhub_lib.export_model(
        os.path.join(OUT, "encoder"),
        bert_config=bert_config,
        model_checkpoint_path=path,
        with_mlm=True,
        vocab_file=vocab_file,
        do_lower_case=True)
    export_tfhub_lib.export_preprocessing(
        os.path.join(OUT, "preprocessor"),
        vocab_file=vocab_file,
        do_lower_case=True,
        tokenize_with_offsets=False,
        default_seq_length=32)
  print(OUT)


if __name__ == "__main__":
  main()
