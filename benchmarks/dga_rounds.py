r"""Round time of DGA weighting against FedAvg's uniform mean on the tiny ASR model.

Dynamic gradient aggregation (`fedasr_tff.algorithms.build_dga_process`; Dimitriadis et al.,
arXiv:2008.02452) adds one scalar per client to a round: the client's loss, mapped to its weight
at the client, and a weighted mean instead of a plain one. This prints, at one cohort, the median
[min, max] time of a round of

* `fed_avg`: the FedAvg process (the baseline);
* `uniform`: the DGA process with uniform weights (the same round through DGA's computation);
* `softmax`: DGA softmax weights (TFF's weighted `MeanFactory`);
* `softmax_dp` and `fed_avg_dp`: the same two with DP (per-layer "dim" clipping and noise:
  `BoundedWeightDPFactory` against `PerLayerDPFactory`);
* `rl`: a DGA-RL round (`algorithms.dga_rl`): the clients, two candidate server steps, a
  validation CER of each on `--validation_speakers` speakers, the policy update;

and each one's ratio to FedAvg's (to FedAvg-with-DP's for `softmax_dp`). Everything runs as the
runner runs it: the `tiny` CTC transformer, clients the speakers of a synthetic espeak-ng corpus,
datasets built as the runner builds them (feature cache filled first), TFF's local C++ execution
context. After `--warmup_rounds` untimed rounds of each, the `--rounds` timed rounds are
interleaved across the variants, rotating their order, so machine noise hits all alike.

  python -m benchmarks.dga_rounds --cohort=32 --rounds=7
"""

import statistics
import time

from absl import app
from absl import flags

from benchmarks import speech_rounds
from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.algorithms import dga
from fedasr_tff.algorithms import dga_rl
from fedasr_tff.runtime import execution_context
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models

_COHORT = flags.DEFINE_integer('cohort', 32, 'Clients per round.', lower_bound=1)
_ROUNDS = flags.DEFINE_integer('rounds', 7, 'Timed rounds of each variant.', lower_bound=1)
_WARMUP_ROUNDS = flags.DEFINE_integer('warmup_rounds', 1, 'Untimed rounds of each first.',
                                      lower_bound=1)
_VALIDATION_SPEAKERS = flags.DEFINE_integer('validation_speakers', 2,
                                            "DGA-RL's validation speakers.", lower_bound=1)
# The corpus and batches of `speech_rounds`' flags, at this benchmark's sizes (whole speakers a
# batch: the pipeline's default batch).
for _name, _value in dict(speakers=10, utterances_per_speaker=6, max_batch_seconds=120.0).items():
  flags.FLAGS.set_default(_name, _value)

FED_AVG, FED_AVG_DP = 'fed_avg', 'fed_avg_dp'
_WEIGHTING = dga.SoftmaxWeighting(0.05, loss_clip=400.0)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  execution_context.set_local_cpp_execution_context()
  with speech_rounds.corpus_root() as root:
    validation_count = _VALIDATION_SPEAKERS.value
    vocab, client_data, validation_data = speech_rounds.clients_and_server(
        root, speech_rounds.SPEAKERS.value, validation_count, server_spec_augment=False)
    model_fn = models.build_tff_model_fn('tiny', vocab.tokens)
    cohort, local_steps = _COHORT.value, speech_rounds.LOCAL_STEPS.value

    def dp_uniform():
      return aggregators.PerLayerDPFactory.gaussian_fixed(1.0, cohort, 1.0, 'dim',
                                                          diagnostics=False)

    def dp_weighted():
      return aggregators.BoundedWeightDPFactory.gaussian_fixed(
          1.0, cohort, 1.0, _WEIGHTING.min_weight, allocation='dim', diagnostics=False)

    def server():
      return optimizers.build('sgd', 1.0)

    common = dict(client_learning_rate=0.2, local_steps=local_steps)
    processes = {
        FED_AVG: algorithms.build_fed_avg_process(model_fn, server_optimizer=server(), **common),
        'uniform': dga.build_dga_process(model_fn, server_optimizer=server(), **common),
        'softmax': dga.build_dga_process(model_fn, weighting=_WEIGHTING,
                                         server_optimizer=server(), **common),
        FED_AVG_DP: algorithms.build_fed_avg_process(model_fn, server_optimizer=server(),
                                                     model_aggregator=dp_uniform(), **common),
        'softmax_dp': dga.build_dga_process(model_fn, weighting=_WEIGHTING,
                                            server_optimizer=server(),
                                            model_aggregator=dp_weighted(), **common),
    }
    rl_process = dga.build_dga_process(model_fn, weighting=_WEIGHTING,
                                       server_optimizer=server(), with_client_round=True,
                                       **common)
    validation_model = model_fn()
    rl = dga_rl.DGARL(rl_process, cohort, lambda weights: evaluation.evaluate(
        validation_model, validation_data, weights).overall.cer)
    states = {name: process.initialize() for name, process in processes.items()}
    states['rl'] = rl_process.initialize()
    cohorts = speech_rounds.Cohorts(client_data, local_steps)

    def round_of(name):
      datasets = cohorts.build(cohort)
      started = time.perf_counter()
      if name == 'rl':
        states[name] = rl.round(states[name], datasets).state
      else:
        states[name] = processes[name].next(states[name], datasets).state
      return time.perf_counter() - started

    names = list(processes) + ['rl']
    times = speech_rounds.interleaved_times(names, round_of, _ROUNDS.value,
                                            _WARMUP_ROUNDS.value)

    print(f'cohort {cohort}, {local_steps} local steps, tiny model, {validation_count} '
          f'validation speakers for DGA-RL; {_ROUNDS.value} timed rounds each '
          '(medians [min, max]):')
    print('| round | seconds | / baseline | baseline |\n|---|---|---|---|')
    for name in names:
      baseline = FED_AVG_DP if name.endswith('_dp') else FED_AVG
      base = statistics.median(times[baseline])
      median = statistics.median(times[name])
      print(f'| {name} | {median:.3f} [{min(times[name]):.3f}, {max(times[name]):.3f}] | '
            f'{median / base:.3f} | {baseline} |')


if __name__ == '__main__':
  app.run(main)
