"""Layer-wise learning-rate decay: a rate multiplier per encoder variable.

With decay d and L transformer layers, the head trains at the full rate,
the top layer (and the pooler above it) at d, each lower layer one more
factor, and the embeddings at d ** (L + 1). The layer of a variable comes
from its name, in this project's naming (`bert.BertEncoder`:
`transformer_layer_<i>/`, `word_embeddings`, `embeddings_layer_norm`,
`pooler_transform`) or Model Garden's, which TF Hub BERT encoders carry
(`transformer/layer_<i>/`, `word_embeddings`, `position_embedding`,
`type_embeddings`, `embeddings/layer_norm`, `pooler_transform`). A name it
cannot place is an error, never a silent full rate.
"""

import re

from trainer.foundation import errors

_LAYER = re.compile(r"(?:^|/)(?:transformer/layer_|transformer_layer_)(\d+)/")
_EMBEDDINGS = re.compile(r"(?:^|/)(word_embeddings|position_embedding|"
                         r"type_embeddings|embeddings/layer_norm|"
                         r"embeddings_layer_norm)(?:/|:|$)")
_POOLER = re.compile(r"(?:^|/)pooler_transform(?:/|:|$)")


def depth(name):
  """0 for the embeddings, i + 1 for transformer layer i, "pooler" for the
  pooler, None for a name it cannot place."""
  layer = _LAYER.search(name)
  if layer:
    return int(layer.group(1)) + 1
  if _EMBEDDINGS.search(name):
    return 0
  if _POOLER.search(name):
    return "pooler"
  return None


def multipliers(encoder_variables, head_variables, decay):
  """Rate multipliers aligned with encoder_variables + head_variables, and
  the table {"embeddings": m, "layer_<i>": m, ..., "pooler": m, "head": 1}.

  Raises:
    ConfigError: with decay < 1, an encoder variable whose layer its name
      does not tell.
  """
  names = [v.name for v in encoder_variables]
  if decay == 1.0:
    return [1.0] * (len(names) + len(head_variables)), {}
  depths = [depth(n) for n in names]
  unplaced = [n for n, d in zip(names, depths) if d is None]
  if unplaced:
    raise errors.ConfigError(
        f"--layer_decay={decay} cannot place {len(unplaced)} encoder "
        f"variables in a layer, e.g. {unplaced[:3]}: their names follow "
        "neither this project's nor Model Garden's BERT naming "
        "(transformer/layer_<i>/, word_embeddings, ...); use --layer_decay=1")
  top = max([d for d in depths if d != "pooler"] + [0])  # L
  rate = lambda d: decay**(top + 1 - (top if d == "pooler" else d))
  table = {"embeddings": rate(0)}
  table.update({f"layer_{i - 1}": rate(i) for i in range(1, top + 1)})
  if "pooler" in depths:
    table["pooler"] = rate("pooler")
  table["head"] = 1.0
  return [rate(d) for d in depths] + [1.0] * len(head_variables), table
