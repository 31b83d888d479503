"""The speech task's client datasets, made by our pipeline (under .venv: the driver, `run_tff`)."""

import os

from fedasr_tff.speech import data


def speech_client_datasets(speech: dict, local_steps: int) -> list:
  """Client i: the i-th speaker's dataset of seed i, at most `local_steps` batches, as the runner
  makes a round's datasets (`max_batches`: a seeded sample of the speaker's utterances).

  Args:
    speech: a spec's `speech` entry (`benchmarks.pfl.task`).
    local_steps: the local steps of the client work.
  """
  root = os.path.join(speech['corpus_dir'], 'librispeech')
  client_data = data.SpeechClientData(
      data.read_librispeech(root, 'train', strict=True), data.Vocabulary(speech['language']),
      max_batch_seconds=speech['max_batch_seconds'], strict=True,
      feature_cache_dir=speech['feature_cache_dir'])
  ids = client_data.client_ids[:speech['clients']]
  if len(ids) < speech['clients']:
    raise ValueError(f'The corpus has {len(ids)} speakers, {speech["clients"]} wanted.')
  return [client_data.create_tf_dataset_for_client(c, seed=i, max_batches=local_steps)
          for i, c in enumerate(ids)]
