"""The one table between `bert.BertEncoder`'s variables and the Hugging Face
BERT state dict, and the safetensors file both directions use.

`bert_tensor_names(encoder)` lists each encoder variable with its Hugging
Face name (BertModel's, without the `bert.` prefix that task models add) and
whether the tensor is transposed (PyTorch's Linear keeps [out, in], our
kernels [in, out]). `trainer.convert_hf` reads a checkpoint through it
(`hf_import.load_weights`) and the Hugging Face export writes one through
it (`serving.huggingface.hf_tensors`), so the two cannot drift apart.
Safetensors files are read and written with the `safetensors` package
(bfloat16 is widened to float32 here: NumPy has no bfloat16), imported
when a file is read or written.
"""

import numpy as np
import tensorflow as tf

from trainer.foundation import errors

# (our module of `bert._TransformerLayer`, its path under encoder.layer.N).
LAYER_PARTS = (
    ("query", "attention.self.query"),
    ("key", "attention.self.key"),
    ("value", "attention.self.value"),
    ("attention_output", "attention.output.dense"),
    ("attention_layer_norm", "attention.output.LayerNorm"),
    ("intermediate", "intermediate.dense"),
    ("output_dense", "output.dense"),
    ("output_layer_norm", "output.LayerNorm"),
)
POOLER = "pooler.dense"
# safetensors dtype names -> NumPy's (BF16 is widened by hand).
DTYPES = dict(
    F64=np.float64,
    F32=np.float32,
    F16=np.float16,
    I64=np.int64,
    I32=np.int32,
    I16=np.int16,
    I8=np.int8,
    U8=np.uint8,
    BOOL=np.bool_)
# Older checkpoints name a LayerNorm's scale and shift gamma and beta.
LEGACY = {".weight": ".gamma", ".bias": ".beta"}


def _part(prefix, module):
  """[(name, variable, transposed)] of a dense layer or a LayerNorm."""
  if hasattr(module, "gamma"):
    return [(prefix + ".weight", module.gamma, False),
            (prefix + ".bias", module.beta, False)]
  return [(prefix + ".weight", module.kernel, True),
          (prefix + ".bias", module.bias, False)]


def bert_tensor_names(encoder):
  """[(Hugging Face name, variable, transposed)] of every variable of
  `bert.BertEncoder` `encoder`, embeddings first, the pooler last."""
  out = [
      ("embeddings.word_embeddings.weight", encoder.word_embeddings, False),
      ("embeddings.position_embeddings.weight", encoder.position_embeddings,
       False),
      ("embeddings.token_type_embeddings.weight", encoder.type_embeddings,
       False),
  ]
  out += _part("embeddings.LayerNorm", encoder.embeddings_layer_norm)
  for i, layer in enumerate(encoder.layers):
    for ours, theirs in LAYER_PARTS:
      out += _part(f"encoder.layer.{i}.{theirs}", getattr(layer, ours))
  return out + _part(POOLER, encoder.pooler)


def legacy_name(name):
  """The gamma/beta spelling of a LayerNorm tensor name, else None."""
  for new, old in LEGACY.items():
    if "LayerNorm" in name and name.endswith(new):
      return name.removesuffix(new) + old
  return None


def _array(name, info, path):
  raw = bytes(info["data"])
  if info["dtype"] == "BF16":  # the top half of a float32
    wide = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
    array = wide.view(np.float32)
  elif info["dtype"] in DTYPES:
    array = np.frombuffer(raw, DTYPES[info["dtype"]])
  else:
    raise errors.ConversionError(
        f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
  return array.reshape(info["shape"])


def read_safetensors(path):
  """{name: np.ndarray} of the .safetensors file at `path` (local or
  gs://; bfloat16 widened to float32)."""
  import safetensors  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path, "rb") as f:
    blob = f.read()
  try:
    tensors = safetensors.deserialize(blob)
  except Exception as e:  # pylint: disable=broad-except
    raise errors.ConversionError(
        f"{path} is not a safetensors file ({errors.first_line(e)})") from None
  return {name: _array(name, info, path) for name, info in tensors}


def safetensors_bytes(tensors):
  """{name: np.ndarray} as the bytes of a float32 .safetensors file (with
  the `format: pt` metadata transformers looks for)."""
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  return safetensors.numpy.save(
      {
          name: np.ascontiguousarray(value, dtype=np.float32)
          for name, value in tensors.items()
      },
      metadata={"format": "pt"})
