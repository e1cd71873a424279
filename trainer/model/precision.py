"""How a run computes: precision and XLA, decided once from the facts.

`choose()` is a pure function of the flags (`--precision`, `--jit_compile`),
the device kind, whether the encoder was saved by this project (it carries
its config and can be rebuilt in Python, `native.NativeEncoder`) and the CPU's
features. It returns the `Route` the run takes and the log line saying why,
or raises `ConfigError` where no route does what was asked:

- This project's encoders are always rebuilt in Python, their dropout
  masks hashed from each element's key (`dropout.keep_mask`): an example
  draws the same masks whether it has a row of its own or shares one
  (--shared_rows), so the two layouts train the same model.
- XLA on CPU/GPU: XLA cannot compile the gradient of a function loaded from
  a SavedModel without treating the batch as compile-time constants, i.e.
  recompiling at every step; this project's encoders are rebuilt and compile
  once (hashed masks fuse, where a Philox draw per element is slower than
  the matmuls in XLA on CPU). Foreign encoders get no XLA off the TPU.
- bfloat16: this project's encoders are rebuilt with bfloat16 matmuls
  (float32 variables, softmax, layer norms, loss and logits) on any device.
  A foreign SavedModel is an opaque float32 graph: the TPU's matrix units
  multiply it in bfloat16 passes already; on CPU grappler's oneDNN
  auto-mixed-precision pass rewrites it, where TensorFlow runs the pass.
- float16 (GPUs without bfloat16): the same rebuilt encoder with float16
  matmuls, or grappler's CUDA auto-mixed-precision rewrite for a foreign
  SavedModel on a GPU; the step scales the loss dynamically
  (`optimization.LossScale`). TPUs compute in bfloat16 and refuse it.
- auto (`resolve_auto`): bfloat16 where the hardware multiplies in it (TPU,
  GPU of compute capability 8.0 or newer, CPU with AMX or AVX512_BF16),
  float16 on older GPUs, float32 elsewhere.
"""

import dataclasses

from trainer.foundation import errors
from trainer.runtime import host


@dataclasses.dataclass(frozen=True)
class Route:
  """What the run does: `rebuild` the encoder as `native.NativeEncoder` (with
  `hashed_dropout`: example-keyed masks), XLA for the replica step,
  oneDNN's rewrite."""

  precision: str
  jit_compile: bool
  rebuild: bool
  hashed_dropout: bool
  onednn_rewrite: bool
  note: str
  cuda_float16_rewrite: bool = False

  @property
  def compute_dtype(self):
    """The rebuilt encoder's matmul dtype."""
    return self.precision

  @property
  def loss_scaling(self):
    """float16 gradients underflow without a scaled loss."""
    return self.precision == "float16"


def resolve_auto(device, cpu_flags=frozenset(), gpu_capability=None):
  """(precision, reason) that --precision=auto picks for these facts;
  `gpu_capability` is the first GPU's (major, minor) compute capability."""
  if device == "tpu":
    return "bfloat16", "a TPU: its matrix units multiply in bfloat16"
  if device == "gpu":
    if gpu_capability and tuple(gpu_capability) >= (8, 0):
      return "bfloat16", (f"a GPU of compute capability "
                          f"{gpu_capability[0]}.{gpu_capability[1]} (>= 8.0 "
                          "has bfloat16 tensor cores)")
    return "float16", ("a GPU of compute capability "
                       f"{'.'.join(map(str, gpu_capability or ('?',)))} "
                       "(< 8.0: float16 tensor cores, no bfloat16)")
  if host.has_native_bfloat16(cpu_flags):
    return "bfloat16", "a CPU with AMX or AVX512_BF16 bfloat16 units"
  return "float32", ("a CPU without AMX or AVX512_BF16 (bfloat16 would be "
                     "emulated, slower than float32)")


def resolve_jit(jit_compile, device, own_encoder):
  """--jit_compile for the replica step on CPU/GPU (TPUs always compile).

  Unset means on for GPU, off for CPU, and off for SavedModels not saved by
  this project, whose loaded-function gradients XLA recompiles every step.
  """
  if device == "tpu":
    return False
  if jit_compile is not None:
    return jit_compile
  return device == "gpu" and own_encoder


def _check_jit(jit, device, own_encoder, encoder_handle, xla_cpu_problem):
  if jit and not own_encoder:  # only an explicit --jit_compile=true
    raise errors.ConfigError(
        f"--jit_compile=true cannot train --encoder_handle={encoder_handle}"
        ": XLA recompiles the gradient of a loaded SavedModel at every step "
        "(the batch becomes a compile-time constant), which is many times "
        "slower than no XLA. Only encoders saved by this project (the demo, "
        "trainer.convert_hf output) are rebuilt for XLA; use "
        "--jit_compile=false")
  if jit and device == "cpu":
    problem = xla_cpu_problem()
    if problem:
      raise errors.ConfigError(
          "--jit_compile=true cannot run here: this TensorFlow build has no "
          f"XLA backend for the CPU ({problem}); the tensorflow-tpu build "
          "compiles XLA for TPUs only. Use --jit_compile=false off the TPU")


def _foreign_bfloat16(device, cpu_flags, encoder_handle):
  """(onednn_rewrite, note) for bfloat16 on a SavedModel not of ours."""
  if device == "tpu":
    return False, ("precision: bfloat16 (the TPU's default matmul passes; "
                   "variables float32)")
  where = ("on GPU" if device == "gpu" else
           None if host.onednn_rewrites_bfloat16(cpu_flags) else
           "on this CPU (no AVX512F: TensorFlow skips its oneDNN bfloat16 "
           "rewrite)")
  if where:
    raise errors.ConfigError(
        f"--precision=bfloat16 cannot apply to --encoder_handle="
        f"{encoder_handle} {where}: it is not an encoder saved by this "
        "project (trainer.convert_hf makes one from a Hugging Face "
        "checkpoint), so only oneDNN's CPU graph rewrite could change it; "
        "use --precision=float32")
  return True, ("precision: bfloat16 via oneDNN auto-mixed-precision "
                "(float32 variables, loss and logits)")


def _xla_note(jit):
  return ("; XLA: the replica step compiled once" if jit else "")


def _float16(device, own_encoder, encoder_handle, jit):
  """The float16 Route: dynamic loss scaling, float16 matmuls."""
  if device == "tpu":
    raise errors.ConfigError(
        "--precision=float16 cannot run on a TPU: TPUs compute in bfloat16 "
        "(no float16 matmul units); use --precision=bfloat16 or auto")
  xla = _xla_note(jit)
  scaling = "; dynamic loss scaling (2**15 to start, x2 after 2000 good steps)"
  if own_encoder:
    slow = ("; float16 on a CPU is emulated and slower than float32: for "
            "checking the numerics, not for speed" if device == "cpu" else "")
    return Route(
        precision="float16",
        jit_compile=jit,
        rebuild=True,
        hashed_dropout=True,
        onednn_rewrite=False,
        note="precision: float16 matmuls in the encoder (float32 variables, "
        "softmax, layer norms, loss and logits)" + scaling + slow + xla)
  if device != "gpu":
    raise errors.ConfigError(
        f"--precision=float16 cannot apply to --encoder_handle={encoder_handle}"
        " on a CPU: it is not an encoder saved by this project (trainer."
        "convert_hf makes one), and only the GPU's auto-mixed-precision "
        "rewrite changes a foreign SavedModel; use --precision=float32")
  return Route(
      precision="float16",
      jit_compile=jit,
      rebuild=False,
      hashed_dropout=False,
      onednn_rewrite=False,
      cuda_float16_rewrite=True,
      note="precision: float16 via grappler's CUDA auto-mixed-precision "
      "rewrite (float32 variables, loss and logits)" + scaling)


def choose_auto(device, own_encoder, cpu_flags, gpu_capability, **kwargs):
  """The Route of --precision=auto: `resolve_auto`'s pick, or float32 where
  that pick cannot apply to this encoder; the note says which and why."""
  picked, reason = resolve_auto(device, cpu_flags, gpu_capability)
  try:
    route = choose(
        picked,
        device=device,
        own_encoder=own_encoder,
        cpu_flags=cpu_flags,
        **kwargs)
  except errors.ConfigError as e:
    if picked == "float32":
      raise
    route = choose(
        "float32",
        device=device,
        own_encoder=own_encoder,
        cpu_flags=cpu_flags,
        **kwargs)
    reason += f", but {picked} does not apply: {e}"
  return dataclasses.replace(
      route, note=f"{route.note} (--precision=auto: {reason})")


def choose(precision,
           jit_compile,
           device,
           own_encoder,
           cpu_flags=frozenset(),
           encoder_handle="",
           xla_cpu_problem=lambda: None):
  """The Route for these facts.

  Args:
    precision: --precision, "float32", "bfloat16" or "float16" (resolve
      "auto" first: `resolve_auto`).
    jit_compile: --jit_compile, True, False or None (unset).
    device: "tpu", "gpu" or "cpu".
    own_encoder: the encoder was saved by this project (`native.saved_config`).
    cpu_flags: the CPU's feature flags (`host.cpu_flags()`).
    encoder_handle: for the messages.
    xla_cpu_problem: called (once) when XLA would compile for the CPU; why
      it cannot (`host.xla_cpu_problem`), or None.

  Raises:
    ConfigError: XLA or bfloat16 asked for where no route provides it.
  """
  jit = resolve_jit(jit_compile, device, own_encoder)
  _check_jit(jit, device, own_encoder, encoder_handle, xla_cpu_problem)
  if precision == "float16":
    return _float16(device, own_encoder, encoder_handle, jit)
  bfloat16 = precision == "bfloat16"
  xla = _xla_note(jit)
  route = dict(
      precision=precision,
      jit_compile=jit,
      rebuild=own_encoder,
      hashed_dropout=own_encoder,
      onednn_rewrite=False)
  if not bfloat16:
    return Route(note="precision: float32" + xla, **route)
  speed = ("" if device != "cpu" or host.has_native_bfloat16(cpu_flags) else
           "; this CPU has no AVX512_BF16/AMX: bfloat16 arithmetic is "
           "emulated, expect it slower than float32")
  if own_encoder:
    return Route(
        note="precision: bfloat16 matmuls in the encoder (float32 "
        "variables, softmax, layer norms, loss and logits)" + speed + xla,
        **route)
  route["onednn_rewrite"], note = _foreign_bfloat16(device, cpu_flags,
                                                    encoder_handle)
  return Route(note=note + (speed if route["onednn_rewrite"] else ""), **route)
