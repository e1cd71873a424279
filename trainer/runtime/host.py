"""The machine the process runs on: CPU features, malloc, XLA for the CPU."""

import ctypes
import functools

import tensorflow as tf

from trainer.foundation import errors

# glibc's mallopt parameter: allocations above it get their own mmap.
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit
_mallopt = None


def keep_malloc_fast():
  """Undoes a side effect of tf.data's generator datasets on glibc malloc.

  The first `from_generator` iterator sets M_TRIM_THRESHOLD to 128 KiB
  ("Memory patch applied" in the log). Setting it also freezes glibc's
  adaptive mmap threshold at 128 KiB, so every activation and gradient
  buffer of a step becomes a fresh mmap: zeroed pages and page faults each
  step. That made a MiniLM step 35% slower on CPU (10.7 vs 16.3 examples/s)
  and raised peak memory. Raising the mmap threshold to 32 MiB restores the
  speed (17.5) and keeps the trim setting. Called before every loop: cheap,
  and immune to when TensorFlow applies its patch. No-op off glibc.
  """
  global _mallopt
  if _mallopt is None:
    try:
      _mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
      _mallopt = False
  if _mallopt:
    _mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def cpu_flags():
  """The feature flags of /proc/cpuinfo (Linux; an empty set elsewhere)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("flags"):
          return frozenset(line.split(":", 1)[1].split())
  except OSError:
    pass
  return frozenset()


def has_native_bfloat16(flags):
  """Whether an x86 CPU with `flags` has bfloat16 arithmetic units."""
  return bool(flags & {"avx512_bf16", "amx_bf16"})


def onednn_rewrites_bfloat16(flags):
  """Whether grappler's oneDNN bfloat16 rewrite acts on a CPU with `flags`.

  TensorFlow skips the pass unless the CPU has AVX512F or AVX-NE-CONVERT
  (`IsBF16SupportedByOneDNNOnThisCPU`); elsewhere the graph stays float32.
  """
  return bool(flags & {"avx512f", "avx_ne_convert"})


@functools.lru_cache(maxsize=None)
def xla_cpu_problem():
  """Why XLA cannot compile for the CPU in this TensorFlow build, or None
  (probed once a process: the run's precision check and AdamW ask).

  The tensorflow-tpu build has no XLA:CPU backend ("could not find
  registered transfer manager for platform Host"): there XLA compiles for
  the TPU only.
  """

  @tf.function(jit_compile=True)
  def xla_cpu_probe(x):
    return x + 1

  try:
    with tf.device("/cpu:0"):
      xla_cpu_probe(tf.constant(1.0))
  except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
          tf.errors.UnimplementedError) as e:
    return errors.first_line(e, 200)
  return None
