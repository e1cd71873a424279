"""A tagging export's outputs as rows: what `trainer.predict` writes for each
text, in the order of the texts.

A row is

    {"text": the text,
     "words": [{"word", "tag", "score", "start", "end"}, ...],
     "entities": [{"entity_group", "score", "word", "start", "end"}, ...]}

`start` and `end` are character offsets in the text (end exclusive), so
`text[start:end]` is the word or the entity; an entity's keys are Hugging
Face's `pipeline("token-classification", aggregation_strategy="first")`'s,
its `word` the text it spans. A text of no word has empty lists.
"""

import itertools

import tensorflow as tf

# Texts read ahead and sorted by length before batching, as classification
# predicts (`predict._SORT_BATCHES`): a batch is padded to its longest.
_SORT_BATCHES = 8


def _text(value):
  return value.decode("utf-8", errors="replace")


def rows(out, texts):
  """One row (the module docstring) per text of `texts` from the outputs
  `out` of a tagging export's `serving_default` on them."""
  out = {k: v.numpy() for k, v in out.items()}
  for i, text in enumerate(texts):
    words = [
        dict(
            word=_text(out["words"][i, j]),
            tag=_text(out["tags"][i, j]),
            score=round(float(out["scores"][i, j]), 6),
            start=int(out["starts"][i, j]),
            end=int(out["ends"][i, j])) for j in range(out["word_count"][i])
    ]
    found = [
        dict(
            entity_group=_text(out["entity_types"][i, j]),
            score=round(float(out["entity_scores"][i, j]), 6),
            word=_text(out["entity_texts"][i, j]),
            start=int(out["entity_starts"][i, j]),
            end=int(out["entity_ends"][i, j]))
        for j in range(out["entity_count"][i])
    ]
    yield dict(text=text, words=words, entities=found)


def predictions(tagger, texts, batch_size=256):
  """Yields one row per text of `texts` (strings), in their order, served
  by the `exported.Tagger` `tagger` in batches of texts of like length."""
  texts = iter(texts)
  while True:
    window = list(itertools.islice(texts, batch_size * _SORT_BATCHES))
    if not window:
      return
    order = sorted(range(len(window)), key=lambda i: len(window[i].split()))
    out = [None] * len(window)
    for start in range(0, len(order), batch_size):
      picked = order[start:start + batch_size]
      batch = [window[i] for i in picked]
      served = tagger.text(text=tf.constant(batch, tf.string))
      for i, row in zip(picked, rows(served, batch)):
        out[i] = row
    yield from out
