"""The recipe binary end to end on a corpus of the user's own (a manifest), its TFF worker killed
after the seed stage and the recipe run again; its start-up refusals. (Its synthetic corpus,
`make demo`'s, is written and read by the ablation's test, `ablation_test.py`.)"""

import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import psutil

from fedasr_tff.speech import data_config
from fedasr_tff.speech.data import corpora
from fedasr_tff.speech.data import synthetic
from tests.experiments import start_up

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A few steps and rounds: the pipeline, not the model's quality.
_SHORT = ('--seed_steps=4', '--rounds=2', '--cohort_size=2', '--local_steps=1', '--eval_every=1',
          '--noprogress')


def _command(*flags):
  return [sys.executable, '-m', 'experiments.recipe', *flags]


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
              PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))


def _run(*flags):
  return subprocess.run(_command(*flags), capture_output=True, text=True, env=_env(), cwd=_ROOT,
                        timeout=900, check=False)


class RecipeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The user's corpus: a manifest (header, path, transcript, speaker) of 6 speakers.
    cls.corpus = tempfile.mkdtemp()
    synthetic.make_corpus(cls.corpus, num_speakers=6, mean_utterances=2, skew=0.0, seed=3,
                          words_per_utterance=(1, 2))
    utterances = corpora.read_librispeech(os.path.join(cls.corpus, 'librispeech'), 'train')
    with open(os.path.join(cls.corpus, 'all.tsv'), 'w') as f:
      f.write('path\ttranscript\tspeaker\n')
      for u in utterances:
        f.write(f'{os.path.relpath(u.path, cls.corpus)}\t{u.transcript}\tspk{u.speaker}\n')

  def test_own_corpus_killed_between_stages_resumes_and_writes_the_report(self):
    output_dir = tempfile.mkdtemp()
    # The documented flag for recorded speech: every stage computes, and records, its features.
    # On TFF's worker (--engine=worker; by default rounds run in process and start none).
    flags = (f'--corpus_dir={self.corpus}', '--layout=manifest', '--split=all.tsv',
             f'--output_dir={output_dir}', '--feature_normalization=cmn', '--engine=worker',
             *_SHORT)
    # The run's TFF worker killed from outside once the seed model is saved and the first
    # federated stage has checkpointed round 0: the run ends with one line naming the worker and
    # saying that rerunning resumes, and the next run reads the seed model back.
    proc = subprocess.Popen(_command(*flags), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), cwd=_ROOT)
    seed_model = os.path.join(output_dir, 'seed', 'model.npz')
    first_checkpoint = os.path.join(output_dir, 'fl_no_noise', 'checkpoints', 'program_state_0')
    deadline = time.monotonic() + 600
    while not os.path.isdir(first_checkpoint) and proc.poll() is None:
      self.assertLess(time.monotonic(), deadline, 'no checkpoint of round 0 appeared')
      time.sleep(0.1)
    self.assertIsNone(proc.poll(), 'the run ended before its worker could be killed')
    self.assertTrue(os.path.isfile(seed_model))
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
               if c.name() == 'worker_binary']
    self.assertLen(workers, 1)
    workers[0].send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    self.assertNotEqual(proc.returncode, 0)
    self.assertNotIn('Traceback', err)
    self.assertIn(f'recipe: TFF worker_binary {workers[0].pid} ended (exit status -15, '
                  'SIGTERM); rerun the same command to resume from the latest checkpoint.', err)
    self.assertFalse(os.path.exists(os.path.join(output_dir, 'report.md')))
    # 10% of 6 speakers held out (at least 1), 30% of the rest the seed (the recipe's default,
    # round(1.5)): 1, 2 and 3 clients.
    speakers = os.path.join(output_dir, 'speakers.json')
    self.assertEqual(stat.S_IMODE(os.stat(speakers).st_mode), 0o600)

    # Refused before anything runs, naming the flags (one interpreter, `start_up`): other roles
    # than the killed run's; a seed model of other settings, not silently reused (a settings
    # file from before --seed_warmup_steps stands for no warm-up, as the resume below shows).
    settings_path = os.path.join(output_dir, 'seed', 'seed_settings.json')
    with open(settings_path) as f:
      settings = json.load(f)
    self.assertEqual(settings['seed_warmup_steps'], 0)
    del settings['seed_warmup_steps']
    with open(settings_path, 'w') as f:
      json.dump(settings, f)
    split_seed, seed_settings = start_up.refusals(
        'experiments.recipe', [[*flags, '--split_seed=7'],
                               [*flags, '--seed_steps=5', '--seed_warmup_steps=2']],
        env=_env(), cwd=_ROOT)
    self.assertNotEqual(split_seed.returncode, 0)
    self.assertIn('--split_seed', split_seed.stderr)
    self.assertNotEqual(seed_settings.returncode, 0)
    self.assertIn(f'{seed_model} was trained with --seed_steps=4, --seed_warmup_steps=0, not '
                  '--seed_steps=5, --seed_warmup_steps=2: give those flags to reuse it, or use '
                  'a new --output_dir.', seed_settings.stderr)

    # The decoding is no part of the training: the run resumes, and scores with beam search and
    # (by default) the words of the seed speakers' transcripts.
    result = _run(*flags, '--decoder=beam', '--beam_width=4', '--top_paths=2')
    self.assertEqual(result.returncode, 0, msg=result.stderr[-4000:])
    out = result.stdout
    self.assertIn('== speakers: 2 seed speakers, 3 clients, 1 held-out speaker (of --split', out)
    self.assertIn(f'reusing {seed_model}', out)
    # Its features recorded with the model, for whoever decodes with it.
    self.assertEqual(data_config.model_features(seed_model), 'cmn')
    for model in ('seed (central', 'FL, no noise', 'FL + DP'):
      self.assertRegex(out, re.escape(model) + r'.*CER +\d+\.\d%  \(greedy, no word list: '
                       r'WER \d+\.\d%\)', msg=model)
    # Both epsilons, each named by the population it covers; 3 clients, cohort 2.
    self.assertRegex(out, r'epsilon_run=\S+ \(this run, K=3, S=2\); '
                          r'epsilon_declared=\d+\.\d+ \(K\'=10,000,000')
    # The word list holds the seed speakers' words and no other (a client's transcript is not
    # the server's to use), owner-only.
    with open(speakers) as f:
      seed_speakers = set(json.load(f)['seed'])
    utterances = corpora.read_manifest(os.path.join(self.corpus, 'all.tsv'))
    seed_words = {w for u in utterances if u.speaker in seed_speakers
                  for w in u.transcript.lower().split()}
    seed_words_file = os.path.join(output_dir, 'seed_words.txt')
    with open(seed_words_file) as f:
      listed = f.read().split()
    self.assertCountEqual(listed, seed_words)
    self.assertEqual(stat.S_IMODE(os.stat(seed_words_file).st_mode), 0o600)
    with open(os.path.join(output_dir, 'report.md')) as f:
      text = f.read()
    self.assertIn("of split 'all.tsv' of", text)
    # Whom the guarantee covers: the seed speakers' data is trained on without DP.
    self.assertIn('the guarantee below covers the federated clients only', text)
    # WER leads, with the open-vocabulary figure beside it, and the per-layer figure shows only
    # what the DP run releases.
    self.assertIn('## Results\n\n**WER (beam search of width 4, the seed speakers\' '
                  f'{len(seed_words)} words): seed (central', text)
    self.assertIn('| Model | WER (%) | CER (%) | WER, greedy, no word list (%) |', text)
    self.assertIn('figure shows what the DP run releases', text)
    self.assertIn('averaged over rounds, from `' + os.path.join(output_dir, 'fl_dp', 'metrics.csv'),
                  text)
    self.assertIn('ε (RDP)', text)
    self.assertIn('ε (this run)', text)
    self.assertIn('ε (declared population)', text)
    for png in ('error_rates.png', 'layer_norms.png'):
      self.assertIn(png, text)
      self.assertGreater(os.path.getsize(os.path.join(output_dir, png)), 1000)

    # A word list of the user's own instead: every stage is read back, the models scored anew.
    words = os.path.join(self.corpus, 'words.txt')
    with open(words, 'w') as f:
      f.write('\n'.join(synthetic.DEFAULT_WORDS['en']))
    result = _run(*flags, f'--word_list={words}')
    self.assertEqual(result.returncode, 0, msg=result.stderr[-4000:])
    with open(os.path.join(output_dir, 'report.md')) as f:
      self.assertIn(f'## Results\n\n**WER (greedy decoding, words of {words}): seed (central',
                    f.read())

  def test_impossible_flag_combinations_are_refused_at_start_up(self):
    out = tempfile.mkdtemp()
    # The same audio, every transcript a number (no word of the English vocabulary).
    with open(os.path.join(self.corpus, 'all.tsv')) as f, \
        open(os.path.join(self.corpus, 'numbers.tsv'), 'w') as numbers:
      numbers.write(f.readline())
      for line in f:
        path, _, speaker = line.rstrip('\n').split('\t')
        numbers.write(f'{path}\t42\t{speaker}\n')
    corpus = (f'--corpus_dir={self.corpus}', '--layout=manifest', '--split=all.tsv')
    cases = [
        (['--synthetic_speakers=6', '--layout=manifest'], '--layout'),
        ([*corpus, '--eval_split=all.tsv', '--held_out=spk0'], '--eval_split'),
        ([*corpus, '--held_out=nobody'], 'nobody'),
        ([*corpus, '--held_out_speakers=5'], '--held_out_speakers'),
        (['--layout=manifest', '--split=all.tsv'], 'corpus_dir'),
        # A word list that cannot be read, or seed speakers who said no word the vocabulary can
        # spell, is refused before any training.
        ([*corpus, f'--word_list={out}/nothing.txt'], '--word_list'),
        ([f'--corpus_dir={self.corpus}', '--layout=manifest', '--split=numbers.tsv'],
         "The seed speakers' transcripts of --split=numbers.tsv: The transcripts have no word "
         'the vocabulary can spell. Give --word_list, or --noseed_word_list.'),
        ([*corpus, '--top_paths=2'], '--top_paths'),
        # Several candidates need a word list to choose from: the seed speakers' is off.
        ([*corpus, '--decoder=beam', '--top_paths=2', '--noseed_word_list'], '--top_paths'),
    ]
    # Each fails during start-up: one interpreter runs them all (`start_up`).
    results = start_up.refusals('experiments.recipe',
                                [[f'--output_dir={out}', *extra] for extra, _ in cases],
                                env=_env(), cwd=_ROOT)
    for result, (extra, expected) in zip(results, cases, strict=True):
      self.assertNotEqual(result.returncode, 0, msg=extra)
      self.assertIn(expected, result.stderr + result.stdout, msg=extra)
    self.assertEqual(os.listdir(out), [])


if __name__ == '__main__':
  absltest.main()
