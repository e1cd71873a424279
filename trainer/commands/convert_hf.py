r"""Convert a Hugging Face BERT checkpoint into a TF Hub encoder/preprocessor.

    python -m trainer.convert_hf --hf_dir=DIR --output_dir=OUT

`trainer.encoders.hf_import.convert` does the work; this prints what was
converted and the handles to train it with.
"""

from trainer.commands import cli


def report(hf_dir, output_dir, record):
  """Prints what was converted and the handles to train it with."""
  c = record["config"]
  print(f"converted {hf_dir}: {c['num_layers']} layers, hidden "
        f"{c['hidden_size']}, {c['num_heads']} heads, vocab "
        f"{c['vocab_size']}, lower_case={record['lower_case']}")
  for note in record["notes"]:
    print(f"note: {note}")
  print(f"  --encoder_handle={output_dir}/encoder "
        f"--preprocessor_handle={output_dir}/preprocessor")


def main(flag_values):
  # Imported here, so --help does not load TensorFlow.
  from trainer.encoders import hf_import  # pylint: disable=g-import-not-at-top
  hf_dir, output_dir = flag_values.hf_dir, flag_values.output_dir
  report(hf_dir, output_dir, hf_import.convert(hf_dir, output_dir))


COMMAND = cli.Command(
    "trainer.convert_hf",
    main,
    command_flags=("hf_dir", "output_dir"),
    required=("hf_dir", "output_dir"))
