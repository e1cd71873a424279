r"""Training throughput of this trainer against its peers, in one run.

    python benchmarks/train_throughput.py [--quick] --output=results.json

Contenders, each a long-lived worker process that builds its model and
warms up once, then runs timed chunks on command; the parent alternates them
(A B C ... A B C ...) so drift hits all equally, for `--rounds` rounds, and
reports each contender's examples over the seconds of all its chunks (the
median chunk too, `median_round` in the JSON). The trainer's contenders time
`--epoch_fraction` of an epoch over the rounds; the peers one loop a round:

  trainer_best   the trainer as `python -m trainer.main` sets it up
                 (`launch.setup`): tf.while_loop of --steps_per_loop
                 steps per call,
                 --jit_compile as given per encoder size (best found: see
                 RESULTS.md)
  trainer_loop1  trainer_best with --steps_per_loop=1: the per-step host
                 overhead is the difference
  trainer_naive  the same with --steps_per_loop=1 --jit_compile=false
  keras_recipe   the common recipe: tf_keras model with hub.KerasLayer
                 (preprocessor) and hub.KerasLayer(encoder, trainable=True),
                 dropout + dense head, model.fit on raw strings
                 (TF_USE_LEGACY_KERAS=1), default steps_per_execution
  keras_recipe_spe  the same with its best steps_per_execution
  keras_hub      keras-hub BertTextClassifier (Keras 3, TensorFlow backend),
                 its own preprocessor over the same vocabulary, random weights
                 of the same architecture, fit on raw strings
  trainer_bf16   trainer_best with --precision=bfloat16 (bfloat16 matmuls,
                 float32 variables and loss: native.NativeEncoder);
                 its ratio to trainer_best is `bf16_speedup` in the JSON
  keras_hub_bf16 keras_hub under Keras 3's `mixed_bfloat16` policy; the
                 ratio trainer_bf16 / keras_hub_bf16 is `bf16_vs_keras_hub`
  hf_dynamic     Hugging Face transformers on PyTorch: `transformers.Trainer`
                 with its default batching (shuffled, each batch padded to
                 its longest: DataCollatorWithPadding), timed inside its own
                 loop (benchmarks/hf_contenders.py); like the trainer's
                 contenders it times --epoch_fraction of an epoch
  hf_group_by_length  the same with `group_by_length` (LengthGroupedSampler)
  hf_max_length  the same with every batch padded to --seq_length
  hf_dynamic_bf16, hf_group_by_length_bf16  the same with `bf16=True`
                 (torch.autocast on the CPU)
Only when named in --contenders (float16 is emulated on CPUs):
  trainer_fp16   trainer_best with --precision=float16 (dynamic loss scale)
  keras_hub_fp16 keras_hub under `mixed_float16`
  hf_max_length_bf16  hf_max_length with `bf16=True`

"vs best peer" is against the fastest float32 peer of the race, TF or HF
(`best_peer` in the JSON names it); the bfloat16 figures against the
fastest bfloat16 peer (`best_bf16_peer`). `vs_hf` holds the trainer's
layouts (fixed, bucketed, shared rows) over each HF batching, bfloat16
rows over the HF bfloat16 twins. The HF contenders' padding is counted on
the batches they timed.

Every contender gets the same global batch, sequence length, float32 and
text (the real tweets in ../shared/data/sentiment140_sample.csv, else
generated text). The trainer and the recipe load the very same encoder
SavedModel; keras-hub and Hugging Face build random weights of its shape.
`--data=mrpc` races the trainer and Hugging Face contenders on MRPC pairs
(the Keras peers read single texts only). Sizes: `demo` (the embedded
encoder) and `minilm` (6 layers, hidden 384, 12 heads, intermediate 1536:
the all-MiniLM-L6 shape).

`--data=conll2003` races named-entity tagging on CoNLL-2003's train.txt
(all of it; an example is a sentence):

    python benchmarks/train_throughput.py --data=conll2003 --sizes=minilm \
        --skip=memory --output=conll.json

At size minilm every contender starts from the real all-MiniLM-L6-v2 (the
trainer's the converted encoder, `contenders.converted_minilm`; Hugging
Face's the checkpoint it came from). By default (`contenders.DEFAULTS`)
it races trainer_best (`--task=tagging`, one sentence a row of
--seq_length), trainer_shared_rows and its bfloat16 twin (several
sentences a row), and hf_dynamic and hf_dynamic_bf16: the Trainer on
BertForTokenClassification with run_ner's recipe (first piece of each word
labelled, the others -100; DataCollatorForTokenClassification pads each
batch to its longest). The host input line measures the tagging stream.

The contenders live in benchmarks/contenders.py (the Hugging Face ones in
benchmarks/hf_contenders.py). Also measured: the float32
and bfloat16 matmul rates of this machine (model FLOPs utilization, MFU, is
against the rate of the precision the contender computes in), host input
throughput per core against what the train step consumes, per-step overhead
(steps_per_loop 1 vs 100, demo encoder), and peak resident memory of a
training run over a 20,000-row file and over a generated 1,600,000-row file
in the Sentiment140 layout.

Training FLOPs per example (forward + backward = 3 x forward, each
multiply-add 2 FLOPs):
    6 * N * S  +  12 * L * S^2 * H
N: non-embedding parameters (per layer 4H^2 + 2HI, plus biases, the pooler
and the head), S: sequence length, L: layers, H: hidden size, I: intermediate
size; the second term is attention's QK^T and AV (2 * L * S^2 * H forward
multiply-adds).
"""

import argparse
import json
import os
import platform
import resource
import select
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top
from benchmarks import contenders  # noqa: E402
from benchmarks import input_throughput  # noqa: E402
# pylint: enable=g-import-not-at-top


def worker(args):
  """A contender process: build, warm up, then answer `run` lines."""
  paths = json.loads(args.paths)
  contender = contenders.make_contender(args.worker, args, paths)
  contender.warm_up()
  real, padded = getattr(contender, "tokens", (None, args.seq_length))
  job = getattr(contender, "job", None)
  # The shapes its steps run at: bucket lengths, or row counts (shared
  # rows, the batch last).
  buckets = list(job.data.layout.shapes) if job else [args.seq_length]
  print(
      json.dumps(
          dict(
              ready=True,
              real_tokens=real,
              padded_tokens=padded,
              buckets=buckets,
              note=getattr(contender, "note", None))),
      flush=True)
  for line in sys.stdin:
    if line.strip() != "run":
      break
    seconds, steps = contender.run(args.steps)
    result = dict(
        examples_per_second=steps * args.batch_size / seconds,
        steps=steps,
        seconds=seconds)
    if hasattr(contender, "chunk_tokens"):
      # Counted on the batches it timed (dynamic shapes).
      result["real_tokens"], result["padded_tokens"] = contender.chunk_tokens()
    print(json.dumps(result), flush=True)
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  traces = contender.traces() if hasattr(contender, "traces") else None
  print(json.dumps(dict(peak_rss_mib=rss, traces=traces)), flush=True)


# -------------------------------------------------------- measurements ----
def matmul_flops(seconds=4.0, dtype="float32"):
  """`dtype` matmul FLOP/s of this machine (TF, all cores): the best of
  square products and the encoder's own [batch*seq, h] x [h, i] shapes."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  best = 0.0
  shapes = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 384, 1536),
            (4096, 1536, 384))
  for m, k, n in shapes:
    a = tf.cast(tf.random.normal([m, k]), dtype)
    b = tf.cast(tf.random.normal([k, n]), dtype)
    # Reduced in the graph, so no product is copied out to NumPy.
    f = tf.function(lambda a, b: tf.reduce_sum(tf.matmul(a, b)))
    f(a, b).numpy()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds / len(shapes):
      f(a, b).numpy()
      reps += 1
    best = max(best, 2 * m * k * n * reps / (time.perf_counter() - start))
  return best


def training_flops_per_example(config, seq_length, num_classes=2):
  """6 * N * S + 12 * L * S^2 * H (see the module docstring)."""
  h, layers, inter = (config["hidden_size"], config["num_layers"],
                      config["intermediate_size"])
  per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
  n = layers * per_layer + h * h + h + h * num_classes
  return 6 * n * seq_length + 12 * layers * seq_length**2 * h


class Worker:
  """The parent's handle on one contender process."""

  def __init__(self, name, args, paths, size):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if name.startswith("keras_recipe"):
      env["TF_USE_LEGACY_KERAS"] = "1"
    if name == "keras_hub":
      env["KERAS_BACKEND"] = "tensorflow"
    if name.startswith("hf_"):
      env["HF_HUB_OFFLINE"] = "1"  # the race builds its models: no hub
    self.name = name
    cmd = [
        sys.executable, __file__, f"--worker={name}",
        f"--paths={json.dumps(paths)}", f"--csv={args.csv}",
        f"--seq_length={args.seq_length}", f"--batch_size={args.batch_size}",
        f"--steps={args.steps[size]}", f"--steps_per_loop={args.loop[size]}",
        f"--jit_compile={args.jit[size]}", f"--precision={args.precision}",
        f"--rounds={args.rounds}", f"--data={args.data}",
        f"--epoch_fraction={args.epoch_fraction}"
    ]
    self.log = tempfile.TemporaryFile("w+")
    self.proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=self.log,
        text=True,
        env=env)
    self.rates, self.examples, self.seconds = [], 0, 0.0
    self.error = None
    self.tokens = (None, None)
    self.counted = [0, 0, 0]  # real and padded tokens of timed examples
    self.batch_size = args.batch_size
    self.traces = None

  def _read(self, timeout=1800):
    ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
    line = self.proc.stdout.readline() if ready else ""
    if not line:
      self.log.seek(0)
      tail = self.log.read()[-2000:]
      self.error = f"{self.name} died: {tail}"
      raise RuntimeError(self.error)
    return json.loads(line)

  def wait_ready(self):
    ready = self._read()
    self.tokens = (ready.get("real_tokens"), ready.get("padded_tokens"))
    self.buckets = ready.get("buckets")
    self.note = ready.get("note")
    return ready

  def run_once(self):
    self.proc.stdin.write("run\n")
    self.proc.stdin.flush()
    result = self._read()
    self.rates.append(result["examples_per_second"])
    self.examples += result["examples_per_second"] * result["seconds"]
    self.seconds += result["seconds"]
    if "padded_tokens" in result:
      self.counted[0] += result["real_tokens"]
      self.counted[1] += result["padded_tokens"]
      self.counted[2] += result["steps"] * self.batch_size
    return result

  def measured_tokens(self):
    """(real, padded) tokens an example: counted over the timed batches
    where the contender counts them, else what it said when ready."""
    real, padded, examples = self.counted
    if examples:
      return real / examples, padded / examples
    return self.tokens

  def close(self):
    if self.proc.poll() is None and not self.error:
      self.proc.stdin.write("quit\n")
      self.proc.stdin.flush()
      try:
        last = self._read(60)
        self.peak, self.traces = last.get("peak_rss_mib"), last.get("traces")
      except RuntimeError:
        self.peak = None
    self.proc.kill()
    self.proc.wait()


def race(args, size, paths, contenders):
  """Starts the contenders (together: start-up and warm-up are not timed),
  then alternates timed runs."""
  started = [Worker(name, args, paths, size) for name in contenders]
  workers = []
  for w in started:
    try:
      w.wait_ready()
      workers.append(w)
    except RuntimeError as e:
      print(f"  {w.name}: failed to start: {str(e)[-600:]}", file=sys.stderr)
      w.close()
  if len(workers) < len(started):
    for w in workers:
      w.close()
    raise RuntimeError("a contender failed to start (see above)")
  for r in range(args.rounds):
    for w in workers:
      result = w.run_once()
      print(
          f"  [{size}] round {r + 1}/{args.rounds} {w.name}: "
          f"{result['examples_per_second']:.1f} examples/s",
          file=sys.stderr,
          flush=True)
  for w in workers:
    w.close()
  real = next((w.tokens[0] for w in workers if w.tokens[0]), None)
  tokens = {w.name: w.measured_tokens() for w in workers}
  return {
      w.name:
          dict(
              examples_per_second=w.examples / w.seconds,
              median_round=statistics.median(w.rates),
              seconds=w.seconds,
              real_tokens=tokens[w.name][0] or real,
              padded_tokens=tokens[w.name][1],
              buckets=w.buckets,
              traces=w.traces,
              note=w.note) for w in workers
  }


def input_rate(args, paths):
  """Host pipeline examples/second on 1 and on 2 cores (pinned processes):
  tweets, or for --data=conll2003 CoNLL sentences through the tagging
  stream."""
  if args.data == "conll2003":
    return input_throughput.pinned_rates(
        contenders.data_path(args),
        paths["preprocessor"],
        args.seq_length,
        128,
        10 if args.quick else 60,
        task="tagging")
  return input_throughput.pinned_rates(args.csv, paths["preprocessor"],
                                       args.seq_length, 128,
                                       10 if args.quick else 60)


def peak_memory(csv_path, steps):
  """Peak RSS (MiB) and seconds of `python -m trainer.main` (demo encoder)
  over a file, measured by a fresh wrapper process (ru_maxrss of children
  covers every child a process ever had)."""
  model_dir = tempfile.mkdtemp()
  cmd = [
      sys.executable, "-m", "trainer.main", f"--model_dir={model_dir}",
      "--encoder_handle=demo", "--preprocessor_handle=demo",
      f"--train_file={csv_path}", "--seq_length=64", "--batch_size=32",
      f"--train_steps={steps}", "--steps_per_loop=10",
      f"--checkpoint_every={steps}", "--validation_fraction=0.001",
      "--export=false"
  ]
  out = subprocess.run(
      [sys.executable, __file__, "--measure_rss",
       json.dumps(cmd)],
      cwd=ROOT,
      capture_output=True,
      text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT))
  if out.returncode != 0:
    raise RuntimeError(out.stdout[-1000:] + out.stderr[-2000:])
  result = json.loads(out.stdout.strip().splitlines()[-1])
  return result["peak_rss_mib"], result["seconds"]


def measure_rss(cmd_json):
  start = time.perf_counter()
  out = subprocess.run(json.loads(cmd_json), capture_output=True, text=True)
  if out.returncode != 0:
    print(out.stderr[-2000:])
    raise SystemExit(1)
  rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
  print(json.dumps(dict(peak_rss_mib=rss, seconds=time.perf_counter() - start)))


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add = parser.add_argument
  add("--quick",
      action="store_true",
      help="tiny sizes, 1 round: proves the program works")
  add("--output", default="")
  add("--sizes",
      default="demo,minilm",
      help="encoders to race ('' = only the host input and memory "
      "measurements)")
  add("--contenders",
      default="",
      help="comma list (default: every contender of --data: "
      "contenders.DEFAULTS)")
  add("--rounds", type=int, default=5)
  add("--seq_length", type=int, default=128)
  add("--batch_size", type=int, default=32)
  add("--steps_per_loop",
      type=int,
      default=100,
      help="trainer_best's steps_per_loop and the recipe's best "
      "steps_per_execution (demo encoder)")
  add("--minilm_steps_per_loop",
      type=int,
      default=5,
      help="the same for the MiniLM-shape encoder, whose steps take seconds")
  add("--jit_compile",
      default="true",
      help="trainer_best's (and trainer_bf16's) --jit_compile for the demo "
      "encoder (best found: RESULTS.md)")
  add("--minilm_jit_compile",
      default="false",
      help="the same for the MiniLM-shape encoder (XLA within noise of the "
      "graph executor there: BUILD_NOTES.md)")
  add("--precision", default="float32")
  add("--skip", default="", help="comma list: memory,input")
  add("--train_rate",
      type=float,
      default=0.0,
      help="examples/s of trainer_best from an earlier race, for "
      "host_input_ratio when --sizes=''")
  add("--csv", default="")
  add("--epoch_fraction",
      type=float,
      default=1.0,
      help="the share of an epoch each trainer contender's timed chunks "
      "cover together (a bucketed or shared-rows step costs what its shape "
      "costs; fixed shapes time as many steps)")
  add("--data",
      default="sentiment140",
      choices=tuple(contenders.DEFAULTS),
      help="what the contenders train on: the shared tweets, GLUE MRPC's "
      "train.tsv pairs, or CoNLL-2003's train.txt tagged (trainer and "
      "Hugging Face contenders only)")
  for internal in ("--steps", "--worker", "--paths", "--measure_rss"):
    add(internal, default="", help="internal")
  return parser.parse_args()


def _settings(args):
  """Per-size settings on `args`; --quick shrinks everything."""
  sizes = [s for s in args.sizes.split(",") if s]  # "" = no race
  if args.quick:
    args.rounds = 1
    # A bucketed contender times this share of an epoch (about 25 steps
    # of the 2,000 quick tweets, as many as the others time).
    args.epoch_fraction = min(args.epoch_fraction, 0.1)
    args.steps_per_loop = min(args.steps_per_loop, 4)
    # Long enough for the demo tokenizer's tweets (about 56 tokens) to share
    # rows; the demo encoder keeps it quick.
    args.seq_length = min(args.seq_length, 128)
    args.batch_size = min(args.batch_size, 8)
    sizes = [s for s in sizes if s == "demo"] or sizes[:1]
  args.jit = {
      "demo": args.jit_compile.lower() in ("1", "true"),
      "minilm": args.minilm_jit_compile.lower() in ("1", "true")
  }
  args.loop = {
      "demo": args.steps_per_loop,
      "minilm": args.minilm_steps_per_loop
  }
  # The peers' steps per timed chunk: whole loops, a few seconds each (the
  # trainer's contenders time --epoch_fraction of an epoch over the rounds).
  args.steps = dict(args.loop)
  return sizes


def race_sizes(args, sizes, workdir, results):
  names = args.contenders.split(",")
  texts = {}
  if sizes and any(name.startswith("hf_") for name in names):
    # The Hugging Face workers read them without TensorFlow.
    texts = dict(texts=contenders.write_train_texts(workdir, args))
  for size in sizes:
    paths = dict(contenders.build_assets(workdir, size, args.data), **texts)
    raced = race(args, size, paths, names)
    add_figures(results, size, raced, paths["config"], args.seq_length,
                args.batch_size)


# The figures a race gives, each {size: value} (`add_figures`).
FIGURES = ("examples_per_second", "contenders", "bucketed", "shared_rows",
           "ratio_vs_best_peer", "best_peer", "ratio_vs_best_bf16_peer",
           "best_bf16_peer", "vs_hf", "mfu", "bf16_speedup",
           "bf16_vs_keras_hub", "flops_per_example")


def new_results(machine, settings, matmul_rate_f32, matmul_rate_bf16):
  """The results before any race: the machine, the settings, its matmul
  FLOP/s in float32 and bfloat16, and an empty table of each figure."""
  return dict(
      machine=machine,
      settings=settings,
      **{k: {} for k in FIGURES},
      matmul_flops_per_second=matmul_rate_f32,
      bfloat16_matmul_flops_per_second=matmul_rate_bf16)


def add_figures(results, size, raced, config, seq_length, batch_size):
  """Enters in `results` what one size's race measured (`raced`: each
  contender's `race` record) and the figures derived from its rates: the
  ratios, MFU (`config`: the encoder's), and from the demo's
  trainer_loop1 the per-step host overhead."""
  rates = {k: v["examples_per_second"] for k, v in raced.items()}
  results["examples_per_second"][size] = rates
  results["contenders"][size] = raced
  best = _fastest(rates, contenders.PEERS)
  best_bf16 = _fastest(rates, contenders.BF16_PEERS)
  peer = rates[best] if best else None
  peer_bf16 = rates[best_bf16] if best_bf16 else None
  if best:
    results["best_peer"][size] = best
  if best_bf16:
    results["best_bf16_peer"][size] = best_bf16
  ours = rates.get("trainer_best")
  if ours and peer:
    results["ratio_vs_best_peer"][size] = ours / peer
  if "trainer_bf16" in rates and peer_bf16:
    results["ratio_vs_best_bf16_peer"][size] = rates["trainer_bf16"] / peer_bf16
  vs_hf = _vs_hf(rates)
  if vs_hf:
    results["vs_hf"][size] = vs_hf
  flops = training_flops_per_example(config, seq_length)
  results["flops_per_example"][size] = flops
  # A bucketed contender computes at its mean padded length (the S^2 term
  # of that mean: within a few % of the buckets' own mix).
  results["mfu"][size] = {
      name:
          rate * training_flops_per_example(
              config, raced[name]["padded_tokens"] or seq_length) /
          matmul_rate(results, name) for name, rate in rates.items()
  }
  if ours and "trainer_bf16" in rates:
    results["bf16_speedup"][size] = rates["trainer_bf16"] / ours
  for kind in ("bucketed", "shared_rows"):
    rate = rates.get(f"trainer_{kind}")
    if rate:
      bf16 = rates.get(f"trainer_{kind}_bf16")
      results[kind][size] = dict(
          vs_fixed=rate / ours if ours else None,
          vs_best_peer=rate / peer if peer else None,
          bf16_vs_fixed_bf16=bf16 /
          rates["trainer_bf16"] if bf16 and "trainer_bf16" in rates else None,
          bf16_vs_best_bf16_peer=bf16 /
          peer_bf16 if bf16 and peer_bf16 else None)
  if "trainer_bf16" in rates and "keras_hub_bf16" in rates:
    results["bf16_vs_keras_hub"][size] = (
        rates["trainer_bf16"] / rates["keras_hub_bf16"])
  if size == "demo" and "trainer_loop1" in rates and ours:
    # Per-step host overhead: time per step saved by steps_per_loop.
    results["per_step_overhead_ms"] = 1000 * batch_size * (
        1 / rates["trainer_loop1"] - 1 / ours)


def _fastest(rates, names):
  """The fastest of `names` that raced, or None."""
  raced = [name for name in names if name in rates]
  return max(raced, key=rates.get) if raced else None


def _vs_hf(rates):
  """{trainer layout: {HF contender: ratio of their rates}}: each layout
  against each HF batching in float32, its bfloat16 twin against theirs."""
  table = {}
  for layout in contenders.LAYOUTS:
    for ours, suffix in ((layout, ""), (contenders.BF16_TWINS[layout],
                                        "_bf16")):
      ratios = {
          hf + suffix: rates[ours] / rates[hf + suffix]
          for hf in contenders.HF
          if ours in rates and hf + suffix in rates
      }
      if ratios:
        table[ours] = ratios
  return table


def matmul_rate(results, contender):
  """The matmul FLOP/s of the precision `contender` computes in (float16:
  the float32 rate; no CPU here has float16 units worth measuring)."""
  if contenders.PRECISION.get(contender) == "bfloat16":
    return results["bfloat16_matmul_flops_per_second"]
  return results["matmul_flops_per_second"]


def measure_host_input(args, sizes, workdir, results):
  size = "minilm" if "minilm" in sizes or not sizes else "demo"
  in_rates = input_rate(args, contenders.build_assets(workdir, size, args.data))
  results["host_input_tweets_per_second"] = in_rates
  consumed = results["examples_per_second"].get(
      size, {}).get("trainer_best") or args.train_rate
  if consumed:
    results["host_input_ratio"] = {
        "per_core": in_rates[1] / consumed,
        "all_cores": in_rates[2] / consumed,
        "encoder": size
    }


def measure_memory(args, workdir, results):
  small_rows, big_rows = (2_000, 20_000) if args.quick else (20_000, 1_600_000)
  small = input_throughput.generated_csv(
      os.path.join(workdir, f"gen{small_rows}.csv"), small_rows)
  big = input_throughput.generated_csv(
      os.path.join(workdir, f"gen{big_rows}.csv"), big_rows)
  steps = 20 if args.quick else 200
  mem_small, t_small = peak_memory(small, steps)
  mem_big, t_big = peak_memory(big, steps)
  results["peak_rss_mib"] = {
      str(small_rows): mem_small,
      str(big_rows): mem_big,
      "ratio": mem_big / mem_small,
      "seconds": [t_small, t_big]
  }


def main():
  args = parse_args()
  if args.measure_rss:
    return measure_rss(args.measure_rss)
  if args.worker:
    args.steps = int(args.steps)
    args.jit_compile = args.jit_compile.lower() in ("1", "true")
    return worker(args)
  workdir = os.path.join(tempfile.gettempdir(), "bert_trainer_bench")
  os.makedirs(workdir, exist_ok=True)
  # --quick (the test's): the first 2,000 tweets, counted in a blink.
  args.csv = args.csv or contenders.text_file(workdir,
                                              2_000 if args.quick else 20_000)
  args.contenders = args.contenders or ",".join(contenders.DEFAULTS[args.data])
  sizes = _settings(args)
  machine = (f"{platform.node()} {platform.processor() or platform.machine()}"
             f" {os.cpu_count()} cores, Python {platform.python_version()}")
  results = new_results(
      machine,
      dict(
          seq_length=args.seq_length,
          batch_size=args.batch_size,
          steps_per_loop=args.loop,
          jit_compile=args.jit,
          precision=args.precision,
          rounds=args.rounds,
          data=contenders.data_path(args),
          task="tagging" if args.data == "conll2003" else "classification"),
      matmul_flops(1.0 if args.quick else 8.0),
      matmul_flops(1.0 if args.quick else 8.0, "bfloat16"))
  race_sizes(args, sizes, workdir, results)
  if "input" not in args.skip.split(","):
    measure_host_input(args, sizes, workdir, results)
  if "memory" not in args.skip.split(","):
    measure_memory(args, workdir, results)
  report(results)
  if args.output:
    with open(args.output, "w") as f:
      json.dump(results, f, indent=2)


def report(results):
  print(f"machine: {results['machine']}")
  s = results["settings"]
  print(f"settings: {json.dumps(s)}")
  print(f"matmul: float32 {results['matmul_flops_per_second'] / 1e9:.1f} "
        "GFLOP/s, bfloat16 "
        f"{results['bfloat16_matmul_flops_per_second'] / 1e9:.1f} GFLOP/s\n")
  # A tagging race's examples are sentences.
  examples = "sentences" if s.get("task") == "tagging" else "examples"
  print(f"| encoder | contender | precision | {examples}/s | vs trainer_best | "
        "real tokens/s | padding | MFU (of its precision's matmul rate) |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- |")
  for size, rates in results["examples_per_second"].items():
    best = rates.get("trainer_best")
    for name, rate in rates.items():
      mfu = results["mfu"][size][name]
      vs = f"{rate / best:.2f}x" if best else "-"
      precision = contenders.PRECISION.get(name, "float32")
      info = results["contenders"][size][name]
      real, padded = info["real_tokens"], info["padded_tokens"]
      tokens = f"{rate * real:.0f}" if real else "-"
      padding = f"{1 - real / padded:.0%}" if real and padded else "-"
      print(f"| {size} | {name} | {precision} | {rate:.1f} | {vs} | "
            f"{tokens} | {padding} | {mfu:.1%} |")
  print()
  report_vs_hf(results["vs_hf"])
  for size, raced in results["contenders"].items():
    for name, info in raced.items():
      if info.get("note"):
        print(f"{size}: {name}: {info['note']}")
      if info["traces"] is not None and len(info["buckets"]) > 1:
        what = "row counts" if "shared_rows" in name else "buckets"
        print(f"{size}: {name} {what} {info['buckets']}, its train loop "
              f"traced {info['traces']} times")
  for kind in ("bucketed", "shared_rows"):
    for size, b in results[kind].items():
      names = dict(
          vs_best_peer=f"vs best peer ({results['best_peer'].get(size)})",
          bf16_vs_best_bf16_peer="bf16 vs best bf16 peer "
          f"({results['best_bf16_peer'].get(size)})")
      parts = [
          f"{names.get(k, k.replace('_', ' '))} {v:.2f}x" for k, v in b.items()
          if v
      ]
      print(f"{size}: trainer_{kind} " + ", ".join(parts))
  for size, ratio in results["ratio_vs_best_peer"].items():
    print(f"{size}: trainer_best / best float32 peer "
          f"({results['best_peer'][size]}) = {ratio:.2f}x")
  for size, ratio in results["ratio_vs_best_bf16_peer"].items():
    print(f"{size}: trainer_bf16 / best bfloat16 peer "
          f"({results['best_bf16_peer'][size]}) = {ratio:.2f}x")
  for size, ratio in results["bf16_speedup"].items():
    print(f"{size}: bfloat16 / float32 (trainer) = {ratio:.2f}x")
  for size, ratio in results["bf16_vs_keras_hub"].items():
    print(f"{size}: trainer_bf16 / keras_hub_bf16 = {ratio:.2f}x")
  if "per_step_overhead_ms" in results:
    print("per-step host overhead saved by steps_per_loop="
          f"{s['steps_per_loop']['demo']} (demo): "
          f"{results['per_step_overhead_ms']:.2f} ms/step")
  if "host_input_ratio" in results:
    r = results["host_input_ratio"]
    rates = results["host_input_tweets_per_second"]
    unit = "sentences" if s.get("task") == "tagging" else "tweets"
    print(f"host input: {rates[1]:.0f} {unit}/s on 1 core, {rates[2]:.0f} on "
          f"2 = {r['per_core']:.1f}x / {r['all_cores']:.1f}x what the "
          f"{r['encoder']} train step consumes")
  if "peak_rss_mib" in results:
    m = results["peak_rss_mib"]
    print("peak RSS of a training run: " +
          ", ".join(f"{k} rows {v:.0f} MiB" for k, v in m.items()
                    if k not in ("ratio", "seconds")) +
          f" (ratio {m['ratio']:.3f})")


def report_vs_hf(vs_hf):
  """The table of the trainer's layouts over the Hugging Face batchings."""
  if not vs_hf:
    return
  print("| encoder | trainer | precision | " +
        " | ".join(f"vs {hf}" for hf in contenders.HF) + " |")
  print("| --- " * (3 + len(contenders.HF)) + "|")
  for size, table in vs_hf.items():
    for ours, ratios in table.items():
      bf16 = contenders.PRECISION.get(ours) == "bfloat16"
      cells = [ratios.get(f"{hf}_bf16" if bf16 else hf) for hf in contenders.HF]
      print(f"| {size} | {ours} | {'bfloat16' if bf16 else 'float32'} | " +
            " | ".join(f"{v:.2f}x" if v else "-" for v in cells) + " |")
  print("(bfloat16 rows against the HF contenders' bfloat16 twins)\n")


if __name__ == "__main__":
  main()
