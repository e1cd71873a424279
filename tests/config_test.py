"""Config: completion of what the user left unset (the demo's defaults,
Vertex AI's locations)."""

from trainer.foundation import config as config_lib


def test_complete_applies_demo_defaults_to_unset_fields_only():
  demo = config_lib.complete(config_lib.Config(), given=set())
  assert demo.learning_rate == 1e-3 and demo.seq_length == 32
  kept = config_lib.complete(
      config_lib.Config(seq_length=64), given={"seq_length"})
  assert kept.seq_length == 64 and kept.learning_rate == 1e-3
  # The Python API: a field that differs from its default counts as given.
  api = config_lib.complete(config_lib.Config(seq_length=48))
  assert api.seq_length == 48 and api.epochs == 3.0
  real = config_lib.complete(
      config_lib.Config(train_file="t.csv"), given={"train_file"})
  assert real.learning_rate == 5e-5  # not a demo run


def test_complete_takes_vertex_locations_for_unset_flags():
  env = dict(AIP_MODEL_DIR="gs://b/m", AIP_CHECKPOINT_DIR="gs://b/c")
  c = config_lib.complete(
      config_lib.Config(train_file="t.csv"), given={"train_file"}, environ=env)
  assert (c.export_base_dir, c.checkpoint_dir,
          c.summary_dir) == ("gs://b/m", "gs://b/c", "")
  given = config_lib.complete(
      config_lib.Config(train_file="t.csv", checkpoint_dir="/mine"),
      given={"train_file", "checkpoint_dir"},
      environ=env)
  assert given.checkpoint_dir == "/mine"


def test_a_run_begun_under_a_former_default_resumes_with_it():
  """--seq_buckets defaulted to auto before issue 37: such a run, resumed
  with the flag unset, keeps auto; a run that said none, or a flag given
  now, is left to the resume check."""
  c = config_lib.Config()
  assert c.seq_buckets == "none"
  kept, names = config_lib.run_defaults(c, dict(seq_buckets="auto"))
  assert (kept.seq_buckets, names) == ("auto", ["seq_buckets"])
  assert config_lib.run_defaults(c, dict(seq_buckets="none")) == (c, [])
  assert config_lib.run_defaults(c, {}) == (c, [])  # predates the flag
  given = config_lib.Config(seq_buckets="16,64")
  assert config_lib.run_defaults(given, dict(seq_buckets="auto")) == (given, [])
