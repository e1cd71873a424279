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
