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

import statistics
import time

from absl import app
from absl import flags

from benchmarks import speech_rounds
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.algorithms import central_work
from fedasr_tff.algorithms import mixed_fl
from fedasr_tff.runtime import execution_context
from fedasr_tff.speech import central_batches
from fedasr_tff.speech import models

_COHORT = flags.DEFINE_integer('cohort', 8, 'Clients per round.', lower_bound=1)
_ROUNDS = flags.DEFINE_integer('rounds', 7, 'Timed rounds of each algorithm.', lower_bound=1)
_WARMUP_ROUNDS = flags.DEFINE_integer('warmup_rounds', 1, 'Untimed rounds of each first.',
                                      lower_bound=1)
_CENTRAL_STEPS = flags.DEFINE_integer('central_steps', 4, 'Central batches a round.',
                                      lower_bound=1)
# The clients' work, corpus and batches of `speech_rounds`' flags, at this benchmark's sizes
# (whole speakers a batch: the pipeline's default batch).
for _name, _value in dict(local_steps=4, speakers=10, utterances_per_speaker=6,
                          max_batch_seconds=120.0).items():
  flags.FLAGS.set_default(_name, _value)

FED_AVG = 'fed_avg'
_SERVER_SPEAKERS = 2


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  execution_context.set_local_cpp_execution_context()
  with speech_rounds.corpus_root() as root:
    vocab, client_data, server_data = speech_rounds.clients_and_server(
        root, speech_rounds.SPEAKERS.value, _SERVER_SPEAKERS, server_spec_augment=True)
    central = central_batches.CentralBatches(server_data, _CENTRAL_STEPS.value)
    model_fn = models.build_tff_model_fn('tiny', vocab.tokens)
    local_steps = speech_rounds.LOCAL_STEPS.value

    processes = {FED_AVG: algorithms.build_fed_avg_process(
        model_fn, client_learning_rate=0.2, local_steps=local_steps,
        server_optimizer=optimizers.build('sgd', 1.0))}
    for algorithm in mixed_fl.ALGORITHMS:
      central_steps = None if algorithm == mixed_fl.ONE_WAY else _CENTRAL_STEPS.value
      processes[algorithm] = algorithms.build_mixed_fl_process(
          model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=0.2,
          local_steps=local_steps, server_optimizer=optimizers.build('sgd', 1.0),
          central_steps=central_steps)
    central_alone = central_work.build_central_work(
        model_fn, optimizer=optimizers.build('sgd', 0.2), steps=_CENTRAL_STEPS.value,
        loss_weight=0.5)
    states = {name: process.initialize() for name, process in processes.items()}
    weights = processes[FED_AVG].get_model_weights(states[FED_AVG])
    central_state = central_alone.initialize()
    cohorts = speech_rounds.Cohorts(client_data, local_steps)

    def round_of(name):
      datasets = cohorts.build(_COHORT.value)
      batches = central.for_round(speech_rounds.SEED, cohorts.round)
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
    times = speech_rounds.interleaved_times(names, round_of, _ROUNDS.value,
                                            _WARMUP_ROUNDS.value)

    base = statistics.median(times[FED_AVG])
    print(f'cohort {_COHORT.value}, {local_steps} local steps, {_CENTRAL_STEPS.value} '
          f'central batches, tiny model; {_ROUNDS.value} timed rounds each (medians [min, max]):')
    print('| what | seconds | / FedAvg | extra over FedAvg |\n|---|---|---|---|')
    for name in names:
      median = statistics.median(times[name])
      print(f'| {name} | {median:.3f} [{min(times[name]):.3f}, {max(times[name]):.3f}] | '
            f'{median / base:.2f} | {median - base:+.3f} |')


if __name__ == '__main__':
  app.run(main)
