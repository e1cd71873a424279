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
  """--seq_buckets defaulted to auto before issue 37 and --shared_rows to
  none before issue 44: such a run, resumed with the flag unset, keeps its
  value; a run that said today's default, or a flag given now, is left to
  the resume check; a record from before a flag ran its `missing` value."""
  c = config_lib.Config()
  assert (c.seq_buckets, c.shared_rows) == ("none", "auto")
  today = dict(seq_buckets="none", shared_rows="auto")
  kept, names = config_lib.run_defaults(c, dict(today, seq_buckets="auto"))
  assert (kept.seq_buckets, names) == ("auto", ["seq_buckets"])
  kept, names = config_lib.run_defaults(c, dict(today, shared_rows="none"))
  assert (kept.shared_rows, names) == ("none", ["shared_rows"])
  assert config_lib.run_defaults(c, today) == (c, [])
  # A record from before both flags: fixed shapes, no buckets.
  kept, names = config_lib.run_defaults(c, {})
  assert (kept.seq_buckets, kept.shared_rows, names) == ("none", "none",
                                                         ["shared_rows"])
  given = config_lib.Config(seq_buckets="16,64")
  assert config_lib.run_defaults(given, dict(today,
                                             seq_buckets="auto")) == (given, [])
  given = config_lib.Config(shared_rows="14,16")
  assert config_lib.run_defaults(given, dict(today,
                                             shared_rows="none")) == (given, [])
