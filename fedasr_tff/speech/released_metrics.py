"""What a speech run releases each round, by name, and what its privacy statement says of it.

The released metrics of a round (`round_metrics`: server, DP and per-layer values, which the
guarantee covers, and under `client/` the client statistics computed without noise, released
only where `FederatedConfig.client_diagnostics` holds), and the disclosures beside the guarantee
(`disclosures`: client statistics, evaluated clients, sampling, the server's data, DGA's weights).
"""

from typing import Any
from typing import Dict
from typing import Tuple

from fedasr_tff.program import privacy_ledger
from fedasr_tff.speech import config as config_lib

# Client statistics go under this prefix, so every sink shows which columns they are.
CLIENT_PREFIX = 'client'


def round_metrics(config: config_lib.FederatedConfig, output, learning_rate, update_norm,
                  seconds) -> Dict[str, Any]:
  """The released metrics of one round (names as `experiments/report.py` reads them).

  The aggregator's measurements (`aggregators.PerLayerDPFactory`) are keyed by clipping group;
  its client statistics are there only when `config.client_diagnostics` holds.
  """
  values = {
      'server': {'learning_rate': float(learning_rate), 'update_norm': float(update_norm)},
      'time': {'round_seconds': float(seconds)},
  }
  # Public: server data and quantities derived from the noised aggregate (`mixed_fl`, DGA's
  # rehearsal); DGA-RL's choice runs only without noise (`config.FederatedConfig`).
  for group in ('mixed', 'rehearsal', 'dga_rl'):
    if group in output.metrics:
      values[group] = {k: float(v) for k, v in output.metrics[group].items()}
  client = {}
  if config.client_diagnostics:
    client_work = output.metrics['client_work']
    client['train'] = {k: float(v) for k, v in client_work['train'].items()}
    for group in ('gradient_dissimilarity', 'weights'):
      if group in client_work:
        client[group] = {k: float(v) for k, v in client_work[group].items()}
  dp = output.metrics['aggregator'].get('dp_query_metrics')
  if dp is not None:
    # Public: the clips of this round are constants or the noised adaptive state, and the
    # noise std on the averaged update follows from them.
    values['dp'] = {'noise_stddev': float(dp['noise_stddev']), 'clip': float(dp['clip'])}
    for name in ('weight_sum', 'weight_denominator'):
      if name in dp:  # DGA weights: the noised weight sum (`aggregators.bounded_weight_dp`).
        values['dp'][name] = float(dp[name])
    if len(dp['per_group']) > 1:
      # Public too: norms of the released (noised) average update per layer, the noise's
      # expected share of them, and the adaptive clips.
      keys = ['released_norm'] + ['noise_norm'] * config.dp.adds_noise + (
          ['clip'] * config.dp.adaptive_clipping)
      values['per_layer'] = {name: {key: float(group[key]) for key in keys}
                             for name, group in dp['per_group'].items()}
    if config.client_diagnostics:
      statistics = dp['client_statistics']
      client['dp'] = {'clipped_fraction': float(statistics['clipped_fraction']),
                      'nonfinite_clients': float(statistics['nonfinite_clients'])}
      if 'weight_sum' in statistics:
        client['dp']['weight_sum'] = float(statistics['weight_sum'])
      client['per_layer'] = {name: {k: float(v) for k, v in group.items()}
                             for name, group in statistics['per_group'].items()}
  if client:
    values[CLIENT_PREFIX] = client
  return values


def evaluation_column(evaluated_clients: int) -> Tuple[str, ...]:
  """The released evaluation, named as a client statistic when it scores clients.

  Args:
    evaluated_clients: how many federated clients the evaluation data holds.
  """
  if not evaluated_clients:
    return ()
  return (f'eval/* and eval_per_speaker.csv (scores of {evaluated_clients} federated clients\' '
          'own data)',)


def client_statistic_columns(config: config_lib.FederatedConfig) -> Tuple[str, ...]:
  """The released column groups computed from client data without noise.

  Args:
    config: the run.

  Returns:
    A description of each released `client/` column group; none unless
    `config.client_diagnostics`.
  """
  if not config.client_diagnostics:
    return ()
  columns = [f'{CLIENT_PREFIX}/train/* (loss, examples, steps, clients, delta and gradient '
             'norms)']
  if config.dga.enabled:
    columns.append(f'{CLIENT_PREFIX}/weights/* (sum and effective number of the clients\' '
                   'aggregation weights)')
  if config.mixed.gradient_dissimilarity:
    columns.append(f'{CLIENT_PREFIX}/gradient_dissimilarity/* (G2, B2 from un-noised client '
                   'gradients)')
  if config.dp.clipping != 'none':
    columns += [f'{CLIENT_PREFIX}/dp/* (clipped fraction, non-finite clients)',
                f'{CLIENT_PREFIX}/per_layer/* (norms before and after clipping, clipped '
                'fractions)']
  return tuple(columns)


def disclosures(config: config_lib.FederatedConfig,
                evaluated_clients: int = 0) -> privacy_ledger.Disclosures:
  """What the run's privacy statement must say it releases beside the DP guarantee.

  Args:
    config: the run.
    evaluated_clients: how many federated clients the released evaluation scores.
  """
  return privacy_ledger.Disclosures(
      evaluated_clients=evaluated_clients if config.dp.adds_noise else 0,
      sampling=config.effective_sampling, sampling_seed_known=config.run.seed is not None,
      noise_seed_known=config.dp.noise_seed is not None,
      noise_placement=config.dp.noise_placement,
      client_statistics=client_statistic_columns(config), pseudo_clients=config.data.iid,
      adaptive_clipping=config.dp.adaptive_clipping,
      central_data=_central_data_description(config), weighting=_weighting_description(config))


def _central_data_description(config: config_lib.FederatedConfig) -> str:
  if not config.uses_central_data:
    return ''
  central = config.central
  source = central.central_corpus_dir or config.data.corpus_dir
  data_text = (f'split {central.central_split!r} ({central.central_speakers} speakers) of '
               f'{source!r}')
  if config.mixed.enabled:
    return (f'Mixed federated learning on {data_text}, --mixed={config.mixed.mixed}, '
            f'w_c = {config.mixed.central_weight:g}')
  uses = []
  if config.dga.rehearses:
    uses.append(f'server rehearsal (--rehearsal_steps={config.dga.rehearsal_steps})')
  if config.dga.rl:
    uses.append('the validation CER of DGA-RL')
  return f'{" and ".join(uses)} on {data_text}'


def _weighting_description(config: config_lib.FederatedConfig) -> str:
  weighting = config.dga.weighting()
  if weighting is None:
    return ''
  text = (f'--aggregation={config.dga.aggregation}: each client\'s delta weighs '
          f'exp(-{weighting.beta:g} (L - {weighting.loss_floor:g})) of its own training loss L '
          f'clipped to [{weighting.loss_floor:g}, {weighting.loss_clip:g}], a weight in '
          f'[{weighting.min_weight:.3g}, 1].')
  if config.dp.adds_noise:
    text += (' The weighted clipped deltas and the sum of the weights are both noised and '
             'accounted as one Gaussian mechanism at the z above '
             f'({100 * config.dga.dga_weight_budget:g}% of its budget on the weight sum); the '
             'update is their ratio with a public floor on the denominator (post-processing).')
  return text
