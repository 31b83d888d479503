r"""Round time of mixed FL (PT, 1-w GT, 2-w GT) against plain FedAvg on the tiny ASR model.

A mixed FL round (`fedasr_tff.algorithms.build_mixed_fl_process`; Augenstein et al. 2022,
arXiv:2205.13655) is FedAvg's round plus the server's central branch inside the same federated
computation. This prints, at one cohort, the median [min, max] time of a round of each
algorithm, its ratio to FedAvg's, and the central branch's own compute measured alone: the
`--central_steps` central steps (`central_work.steps`, PT and 2-w GT) or the one central gradient
over the same batches (`central_work.gradient`, 1-w GT), as TFF computations on the same worker.
The extra time of a mixed round over FedAvg should be about that compute and nothing more. TFF
may overlap the central branch with the clients' steps (they do not depend on each other in PT
and 2-w GT), in which case the extra time can be less.

Everything runs as the runner runs it: the `tiny` CTC transformer, clients the speakers of a
synthetic espeak-ng corpus, each client's round dataset built as the runner builds it (the
feature cache filled first), the central batches drawn by `program.central_batches` from the
server's speakers, TFF's local C++ execution context (`fedasr_tff.runtime`). After
`--warmup_rounds` untimed rounds of each algorithm, the `--rounds` timed rounds are interleaved
across the algorithms, rotating their order, so machine noise hits all alike. No DP (the
aggregator's cost is `benchmarks/aggregator_overhead.py`'s).

  python -m benchmarks.mixed_fl_rounds --cohort=8 --rounds=7
"""

import os
import shutil
import statistics
import tempfile
import time

from absl import app
from absl import flags

from fedasr_tff import algorithms
from fedasr_tff import data
from fedasr_tff import models
from fedasr_tff import optimizers
from fedasr_tff.algorithms import central_work
from fedasr_tff.algorithms import mixed_fl
from fedasr_tff.data import synthetic
from fedasr_tff.program import cohorts
from fedasr_tff.runtime import execution_context
from fedasr_tff.speech import central_batches

_COHORT = flags.DEFINE_integer('cohort', 8, 'Clients per round.', lower_bound=1)
_ROUNDS = flags.DEFINE_integer('rounds', 7, 'Timed rounds of each algorithm.', lower_bound=1)
_WARMUP_ROUNDS = flags.DEFINE_integer('warmup_rounds', 1, 'Untimed rounds of each first.',
                                      lower_bound=1)
_LOCAL_STEPS = flags.DEFINE_integer('local_steps', 4, 'Local steps of every client.',
                                    lower_bound=1)
_CENTRAL_STEPS = flags.DEFINE_integer('central_steps', 4, 'Central batches a round.',
                                      lower_bound=1)
_SPEAKERS = flags.DEFINE_integer('speakers', 10, 'Client speakers of the corpus.', lower_bound=1)
_CORPUS_DIR = flags.DEFINE_string('corpus_dir', None,
                                  'Folder for the synthetic corpus (default: a temporary one).')

FED_AVG = 'fed_avg'
_SECRET = 0


def _timed(fn):
  started = time.perf_counter()
  fn()
  return time.perf_counter() - started


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  execution_context.set_local_cpp_execution_context()
  root = _CORPUS_DIR.value or tempfile.mkdtemp()
  try:
    ls_dir = os.path.join(root, 'librispeech')
    if not os.path.isdir(os.path.join(ls_dir, 'train')):
      synthetic.make_corpus(root, num_speakers=_SPEAKERS.value + 2, mean_utterances=6,
                            skew=0.0, seed=0)
    utterances = data.read_librispeech(ls_dir, 'train', strict=True)
    speakers = sorted({u.speaker for u in utterances})
    vocab = data.Vocabulary('en')
    cache = os.path.join(root, 'feature_cache')
    client_data = data.SpeechClientData([u for u in utterances if u.speaker in speakers[2:]],
                                        vocab, spec_augment=True, feature_cache_dir=cache)
    server_data = data.SpeechClientData([u for u in utterances if u.speaker in speakers[:2]],
                                        vocab, spec_augment=True, feature_cache_dir=cache)
    for source in (client_data, server_data):
      for speaker in source.client_ids:
        source.create_tf_dataset_for_client(speaker, seed=0)   # Fills the feature cache.
    central = central_batches.CentralBatches(server_data, _CENTRAL_STEPS.value)
    model_fn = models.build_tff_model_fn('tiny', vocab.tokens)

    processes = {FED_AVG: algorithms.build_fed_avg_process(
        model_fn, client_learning_rate=0.2, local_steps=_LOCAL_STEPS.value,
        server_optimizer=optimizers.build('sgd', 1.0))}
    for algorithm in mixed_fl.ALGORITHMS:
      central_steps = None if algorithm == mixed_fl.ONE_WAY else _CENTRAL_STEPS.value
      processes[algorithm] = algorithms.build_mixed_fl_process(
          model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=0.2,
          local_steps=_LOCAL_STEPS.value, server_optimizer=optimizers.build('sgd', 1.0),
          central_steps=central_steps)
    central_alone = central_work.build_central_work(
        model_fn, optimizer=optimizers.build('sgd', 0.2), steps=_CENTRAL_STEPS.value,
        loss_weight=0.5)
    states = {name: process.initialize() for name, process in processes.items()}
    weights = processes[FED_AVG].get_model_weights(states[FED_AVG])
    central_state = central_alone.initialize()

    round_num = 0

    def round_of(name):
      nonlocal round_num
      round_num += 1
      ids = client_data.client_ids
      datasets = [client_data.create_tf_dataset_for_client(
          ids[i % len(ids)], seed=cohorts.client_seed(_SECRET, round_num, f'entry{i}'),
          max_batches=_LOCAL_STEPS.value) for i in range(_COHORT.value)]
      batches = central.for_round(_SECRET, round_num)
      started = time.perf_counter()
      if name == FED_AVG:
        states[name] = processes[name].next(states[name], datasets).state
      elif name == 'central_steps':
        central_alone.steps(central_state, weights, batches)
      elif name == 'central_gradient':
        central_alone.gradient(weights, batches)
      else:
        states[name] = processes[name].next(states[name], datasets, batches).state
      return time.perf_counter() - started

    names = list(processes) + ['central_steps', 'central_gradient']
    for name in names:
      for _ in range(_WARMUP_ROUNDS.value):
        round_of(name)
    times = {name: [] for name in names}
    for r in range(_ROUNDS.value):
      for name in names[r % len(names):] + names[:r % len(names)]:
        times[name].append(round_of(name))

    base = statistics.median(times[FED_AVG])
    print(f'cohort {_COHORT.value}, {_LOCAL_STEPS.value} local steps, {_CENTRAL_STEPS.value} '
          f'central batches, tiny model; {_ROUNDS.value} timed rounds each (medians [min, max]):')
    print('| what | seconds | / FedAvg | extra over FedAvg |\n|---|---|---|---|')
    for name in names:
      median = statistics.median(times[name])
      print(f'| {name} | {median:.3f} [{min(times[name]):.3f}, {max(times[name]):.3f}] | '
            f'{median / base:.2f} | {median - base:+.3f} |')
  finally:
    if not _CORPUS_DIR.value:
      shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
  app.run(main)
