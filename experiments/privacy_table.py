r"""Recomputes user-level ε for the paper's published configurations, or for one of your own.

Table mode (default) reads a CSV with the columns of `fedasr_tff/privacy/data/privacy_tables.csv`
(default: that file, our transcription of every published row: Pelikan et al., NeurIPS 2025,
arXiv:2310.00098, Tables 1, 17, 18 and 20) and prints, for every row, the published ε next to
ours: RDP over the paper's coarse order grid, RDP over our fine default grid, and PLD, with
relative differences.

  bazel run //experiments:privacy_table
  python -m experiments.privacy_table --csv=my_rows.csv --accountants=rdp

Single-configuration mode starts as soon as `--steps` is given:

  python -m experiments.privacy_table --sigma_dp=3e-6 --cohort_size=204800 \
      --population=69506000 --steps=2034
  python -m experiments.privacy_table --noise_multiplier=1.024 --sampling_rate=0.0295 --steps=2006
  # Population extrapolation at fixed sigma_dp (Pelikan et al. 2025, Sec. 4.3 and Table 1):
  python -m experiments.privacy_table --sigma_dp=3e-6 --cohort_size=1024 --population=34753 \
      --steps=2006 --cohort_scale=200 --population_scale=10 --extrapolated_steps=2034
"""

import math

from absl import app
from absl import flags

from experiments import cli
from fedasr_tff import privacy

_CSV = flags.DEFINE_string('csv', privacy.PUBLISHED_TABLES_CSV,
                           'CSV with columns z, S, K, T, epsilon (and optionally table, setting, '
                           'renyi_order, check, delta), as in our privacy_tables.csv.')
_ACCOUNTANTS = flags.DEFINE_list('accountants', ['rdp', 'pld'],
                                 'Accountants to report: any of rdp, pld.')
_ONLY_OK = flags.DEFINE_bool('only_ok', False, 'Table mode: only rows whose check column is ok.')

_NOISE_MULTIPLIER = flags.DEFINE_float('noise_multiplier', None,
                                       'z, noise std on the cohort sum in units of the clip.')
_SIGMA_DP = flags.DEFINE_float('sigma_dp', None,
                               'sigma_DP, noise std on the cohort average in units of the clip '
                               '(needs --cohort_size; z = sigma_dp * cohort_size).')
_SAMPLING_RATE = flags.DEFINE_float('sampling_rate', None, 'q, per-round sampling rate of users.')
_COHORT_SIZE = flags.DEFINE_integer('cohort_size', None, 'S, clients per round.')
_POPULATION = flags.DEFINE_integer('population', None, 'K, number of users (q = S/K).')
_STEPS = flags.DEFINE_integer('steps', None, 'T, number of rounds; selects single mode.')
_DELTA = flags.DEFINE_float('delta', privacy.PUBLISHED_DELTA, 'Target delta.')
_COHORT_SCALE = flags.DEFINE_float('cohort_scale', None,
                                   'Extrapolation: scale S and K by this factor at fixed sigma_dp.')
_POPULATION_SCALE = flags.DEFINE_float('population_scale', 1.0,
                                       'Extrapolation: then scale K alone by this factor.')
_EXTRAPOLATED_STEPS = flags.DEFINE_integer('extrapolated_steps', None,
                                           'Extrapolation: T of the extrapolated run '
                                           '(default: --steps).')

flags.mark_flags_as_mutual_exclusive(['noise_multiplier', 'sigma_dp'])


@flags.validator('accountants', message='--accountants takes a list of: rdp, pld.')
def _check_accountants(value):
  return bool(value) and all(name in privacy.ACCOUNTANTS for name in value)


@flags.multi_flags_validator(
    ['steps', 'noise_multiplier', 'sigma_dp', 'sampling_rate', 'cohort_size', 'population'],
    message='Single mode (--steps) needs --noise_multiplier or --sigma_dp, and --sampling_rate '
    'or both --cohort_size and --population; --sigma_dp needs --cohort_size.')
def _check_single_mode(values):
  if values['steps'] is None:
    return True
  has_noise = values['noise_multiplier'] is not None or values['sigma_dp'] is not None
  has_rate = values['sampling_rate'] is not None or (values['cohort_size'] is not None and
                                                     values['population'] is not None)
  sigma_ok = values['sigma_dp'] is None or values['cohort_size'] is not None
  return has_noise and has_rate and sigma_ok


@flags.multi_flags_validator(['cohort_scale', 'sigma_dp', 'population'],
                             message='--cohort_scale (extrapolation) needs --sigma_dp, '
                             '--cohort_size and --population.')
def _check_extrapolation(values):
  return values['cohort_scale'] is None or (values['sigma_dp'] is not None and
                                            values['population'] is not None)


def _relative(ours: float, published: float) -> str:
  if not math.isfinite(ours) or published == 0:
    return 'n/a'
  return f'{ours / published - 1:+.3f}'


def _format_epsilon(value: float) -> str:
  # Four significant digits: the published tables' ε are compared with ours to the third.
  return privacy.format_epsilon(value, digits=4)


def _print_table() -> int:
  try:
    rows = privacy.read_privacy_table(_CSV.value)
  except ValueError as e:  # The message names the file, line and column.
    raise app.UsageError(f'--csv: {e}') from e
  if _ONLY_OK.value:
    rows = [row for row in rows if row.check == 'ok']
  accountants = _ACCOUNTANTS.value
  header = ['line', 'table', 'setting', 'z', 'q', 'T', 'published']
  if 'rdp' in accountants:
    header += ['rdp_G', 'order_G', 'rel_G', 'rdp', 'order', 'rel']
  if 'pld' in accountants:
    header += ['pld', 'rel_pld']
  header.append('check')
  print('\t'.join(header))
  worst_ok = 0.0
  for row in rows:
    cells = [str(row.line), row.table, row.setting, f'{row.noise_multiplier:g}',
             f'{row.sampling_rate:.5g}', str(row.steps), _format_epsilon(row.epsilon)]
    if 'rdp' in accountants:
      coarse, coarse_order = privacy.compute_epsilon_and_order(
          row.noise_multiplier, row.sampling_rate, row.steps, row.delta,
          orders=privacy.PUBLISHED_RDP_ORDERS)
      fine, fine_order = privacy.compute_epsilon_and_order(row.noise_multiplier,
                                                           row.sampling_rate, row.steps,
                                                           row.delta)
      cells += [_format_epsilon(coarse), f'{coarse_order:g}', _relative(coarse, row.epsilon),
                _format_epsilon(fine), f'{fine_order:g}', _relative(fine, row.epsilon)]
      if row.check == 'ok':
        worst_ok = max(worst_ok, abs(coarse / row.epsilon - 1))
    if 'pld' in accountants:
      pld = privacy.compute_epsilon(row.noise_multiplier, row.sampling_rate, row.steps,
                                    row.delta, accountant='pld')
      cells += [_format_epsilon(pld), _relative(pld, row.epsilon)]
    cells.append(row.check)
    print('\t'.join(cells), flush=True)
  if 'rdp' in accountants:
    n_ok = sum(row.check == 'ok' for row in rows)
    print(f'# {len(rows)} rows; {n_ok} flagged ok; worst relative difference on ok rows with the '
          f'published order grid: {worst_ok:.3f}')
  return 0


def _print_single() -> int:
  steps = _STEPS.value
  delta = _DELTA.value
  if _SIGMA_DP.value is not None:
    noise_multiplier = privacy.noise_multiplier_from_sigma_dp(_SIGMA_DP.value,
                                                              _COHORT_SIZE.value)
  else:
    noise_multiplier = _NOISE_MULTIPLIER.value
  if _SAMPLING_RATE.value is not None:
    sampling_rate = _SAMPLING_RATE.value
  else:
    if _COHORT_SIZE.value > _POPULATION.value:
      raise app.UsageError('--cohort_size must not exceed --population.')
    sampling_rate = _COHORT_SIZE.value / _POPULATION.value
  print(f'z={noise_multiplier:g} q={sampling_rate:.6g} T={steps} delta={delta:g}')
  for accountant in _ACCOUNTANTS.value:
    if accountant == 'rdp':
      epsilon, order = privacy.compute_epsilon_and_order(noise_multiplier, sampling_rate, steps,
                                                         delta)
      print(f'  rdp: epsilon={_format_epsilon(epsilon)} (order {order:g})')
    else:
      epsilon = privacy.compute_epsilon(noise_multiplier, sampling_rate, steps, delta, 'pld')
      print(f'  pld: epsilon={_format_epsilon(epsilon)}')
  if _COHORT_SCALE.value is not None:
    for accountant in _ACCOUNTANTS.value:
      result = privacy.extrapolate(
          _SIGMA_DP.value, _COHORT_SIZE.value, _POPULATION.value, steps, delta,
          cohort_scale=_COHORT_SCALE.value, population_scale=_POPULATION_SCALE.value,
          extrapolated_steps=_EXTRAPOLATED_STEPS.value, accountant=accountant)
      print(f'extrapolated ({accountant}): S={result.cohort_size} K={result.population} '
            f'q={result.sampling_rate:.6g} z={result.noise_multiplier:g} T={result.steps} '
            f'epsilon={_format_epsilon(result.epsilon)}')
  return 0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  try:
    return _print_single() if _STEPS.value is not None else _print_table()
  except ValueError as e:
    raise app.UsageError(str(e)) from e


if __name__ == '__main__':
  cli.run(main)
