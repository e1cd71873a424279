"""A tagging export's outputs as rows: what `trainer.predict` writes for each
text (batched and put back in the order of the texts as classification's
rows are, `predict.in_order`).

A row is

    {"text": the text,
     "words": [{"word", "tag", "score", "start", "end"}, ...],
     "entities": [{"entity_group", "score", "word", "start", "end"}, ...]}

`start` and `end` are character offsets in the text (end exclusive), so
`text[start:end]` is the word or the entity; an entity's keys are Hugging
Face's `pipeline("token-classification", aggregation_strategy="first")`'s,
its `word` the text it spans. A text of no word has empty lists.
"""


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
