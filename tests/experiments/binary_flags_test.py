"""Which flags the binaries define: only those that configure them, in the runner's vocabulary.

Each binary is imported in a subprocess of its own (as `python -m` runs it): absl's flags are
global, and binaries with their own defaults for the same flag cannot share a process.
"""

import functools
import json
import os
import subprocess
import sys

from absl.testing import absltest

from fedasr_tff.program import fields as fields_lib
from fedasr_tff.retrieval import retriever_config
from fedasr_tff.speech import data_config

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The flags of the speech wing's data and model: no retriever binary takes them.
_SPEECH = {*fields_lib.config_fields(data_config.DataConfig),
           *fields_lib.config_fields(data_config.ModelConfig)}
# The retriever's configuration, whose fields its binaries define.
_RETRIEVER = set(fields_lib.config_fields(retriever_config.RetrieverConfig))
_PRINT_FLAGS = ('import importlib, json, sys\n'
                'from absl import flags\n'
                'importlib.import_module(sys.argv[1])\n'
                'print(json.dumps({name: flags.FLAGS[name].default for name in flags.FLAGS}))\n')


@functools.lru_cache(maxsize=None)  # an import of a binary costs about 10 s of CPU
def _flags(module):
  """{flag: default} of every flag defined once `module` is imported (read-only)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3',
             PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))
  result = subprocess.run([sys.executable, '-c', _PRINT_FLAGS, module], capture_output=True,
                          text=True, env=env, cwd=_ROOT, timeout=300, check=False)
  if result.returncode:
    raise AssertionError(f'importing {module} failed: {result.stderr[-3000:]}')
  return json.loads(result.stdout.strip().splitlines()[-1])


class BinaryFlagsTest(absltest.TestCase):

  def test_the_retriever_binaries_define_no_speech_flag(self):
    for module in ('experiments.train_retriever', 'experiments.retriever_study'):
      defined = _flags(module)
      # A name both wings use (--feature_cache_dir) is the retriever's own field there.
      self.assertEmpty(_SPEECH & set(defined) - _RETRIEVER, module)
      self.assertIn('output_dir', defined, module)
    # The retriever's own --seed (its configuration's), not the speech run's.
    self.assertEqual(_flags('experiments.train_retriever')['seed'], 0)

  def test_a_speech_binary_defines_them(self):
    self.assertContainsSubset(_SPEECH, set(_flags('experiments.train_federated')))

  def test_the_recipe_takes_the_runners_names_with_its_own_defaults(self):
    defined = _flags('experiments.recipe')
    # 100 rounds, not the cpu preset's 30 (`recipe.RECIPE_ROUNDS`); no seed warm-up yet.
    self.assertEqual({name: defined[name] for name in ('rounds', 'cohort_size', 'local_steps',
                                                       'seed_warmup_steps')},
                     {'rounds': 100, 'cohort_size': 16, 'local_steps': 1,
                      'seed_warmup_steps': 0})
    self.assertEmpty([name for name in defined if name.startswith('fl_')])
    # The corpus and its speakers' roles, the batch size, --spec_augment and
    # --feature_normalization (data fields; off, and each mel channel's mean
    # removed) and the model: not the runner's own speaker part, IID control or feature cache
    # (the recipe chooses the speakers and caches under --output_dir).
    self.assertEqual(_SPEECH & set(defined),
                     {'corpus_dir', 'layout', 'split', 'eval_split', 'language', 'seed_fraction',
                      'split_seed', 'max_batch_seconds', 'model_config', 'spec_augment',
                      'feature_normalization'})
    self.assertFalse(defined['spec_augment'])
    self.assertEqual(defined['feature_normalization'], 'cmn')
    # The recipe's own seed share (30%), not the runner's 10%, and the cpu preset's seed steps.
    self.assertEqual((defined['seed_fraction'], defined['seed_steps']), (0.3, 2000))

  def test_the_training_binaries_default_to_the_cpu_preset(self):
    # In-process, config_flags_test checks what the presets build; here, that the binaries
    # define their flags with them.
    central = _flags('experiments.train_central')
    self.assertEqual({name: central[name] for name in (
        'preset', 'spec_augment', 'feature_normalization', 'seed_fraction', 'steps',
        'optimizer', 'learning_rate', 'decay_every')},
                     {'preset': 'cpu', 'spec_augment': False, 'feature_normalization': 'cmn',
                      'seed_fraction': 0.1, 'steps': 2000, 'optimizer': 'adam',
                      'learning_rate': 2e-3, 'decay_every': None})
    federated = _flags('experiments.train_federated')
    self.assertEqual({name: federated[name] for name in (
        'preset', 'spec_augment', 'feature_normalization', 'seed_fraction', 'rounds',
        'cohort_size', 'local_steps', 'server_lr', 'clip')},
                     {'preset': 'cpu', 'spec_augment': False, 'feature_normalization': 'cmn',
                      'seed_fraction': 0.1, 'rounds': 30, 'cohort_size': 16,
                      'local_steps': None, 'server_lr': 0.003, 'clip': None})


if __name__ == '__main__':
  absltest.main()
