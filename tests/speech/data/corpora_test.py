"""Readers on tiny copies of the real layouts, made in the test with the synthetic corpus."""

import os
import shutil
import subprocess
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_io as tfio

from fedasr_tff.speech import data
from fedasr_tff.speech.data import synthetic


class CorporaTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.voices = synthetic.make_corpus(cls.root, num_speakers=3, mean_utterances=2, seed=3,
                                       layouts=('librispeech', 'common_voice'))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root)
    super().tearDownClass()

  def _copy(self):
    target = self.enterContext(tempfile.TemporaryDirectory())
    shutil.copytree(self.root, target, dirs_exist_ok=True)
    return target

  def test_librispeech_layout(self):
    report = data.ReadReport()
    utterances = data.read_librispeech(os.path.join(self.root, 'librispeech'), 'train',
                                       report=report)
    self.assertEmpty(report.problems)
    self.assertEqual(sorted({u.speaker for u in utterances}), sorted(self.voices))
    for u in utterances:
      self.assertTrue(u.path.endswith('.flac'))
      self.assertEqual(u.transcript, u.transcript.upper())
      waveform = data.load_audio(u.path)
      self.assertEqual(data.log_mel_features(waveform).shape[1], 80)

  def test_common_voice_layout_matches_librispeech(self):
    ls = data.read_librispeech(os.path.join(self.root, 'librispeech'), 'train')
    cv = data.read_common_voice(os.path.join(self.root, 'common_voice'), 'train')
    self.assertLen(cv, len(ls))
    self.assertEqual({u.speaker for u in cv}, {f'client-{s}' for s in self.voices})
    normalize = data.normalize_transcript
    self.assertEqual(sorted(normalize(u.transcript) for u in cv),
                     sorted(normalize(u.transcript) for u in ls))
    mp3 = data.load_audio(cv[0].path)  # An MP3 at 22.05 kHz, resampled to 16 kHz.
    flac = data.load_audio(ls[0].path)
    self.assertAlmostEqual(len(mp3) / len(flac), 1.0, delta=0.1)

  def test_8khz_files_in_a_loop_are_resampled_without_retracing(self):
    # A recorded corpus at 8 kHz: files of several lengths, read one after another as the
    # feature cache does. TF warns after five traces of one function.
    root = self.enterContext(tempfile.TemporaryDirectory())
    flac = data.read_librispeech(os.path.join(self.root, 'librispeech'), 'train')[0].path
    paths = []
    for i in range(7):
      paths.append(os.path.join(root, f'{i}.wav'))
      subprocess.run(['sox', flac, '-r', '8000', paths[-1], 'trim', '0', f'{0.3 + 0.05 * i}'],
                     check=True)
    data.load_audio(paths[0])  # The first trace, for the rate, is allowed.
    with self.assertNoLogs(tf.get_logger(), 'WARNING'):
      waveforms = [data.load_audio(path) for path in paths]
    for i, waveform in enumerate(waveforms):
      self.assertAlmostEqual(len(waveform) / 16000, 0.3 + 0.05 * i, delta=0.01)
    # The traced resampler gives tensorflow-io's own eager result.
    eight_khz = tf.cast(tfio.audio.AudioIOTensor(paths[3]).to_tensor()[:, 0], tf.float32) / 32768
    np.testing.assert_allclose(waveforms[3], tfio.audio.resample(eight_khz, 8000, 16000).numpy(),
                               atol=1e-6)

  def test_missing_trans_txt_is_reported_per_file(self):
    root = self._copy()
    chapter = os.path.join(root, 'librispeech', 'train', '1000', '1')
    os.remove(os.path.join(chapter, '1000-1.trans.txt'))
    report = data.ReadReport()
    utterances = data.read_librispeech(os.path.join(root, 'librispeech'), 'train', report=report)
    self.assertNotIn('1000', {u.speaker for u in utterances})
    self.assertNotEmpty(report.problems)
    self.assertTrue(all(reason == 'missing .trans.txt' and chapter in path
                        for path, reason in report.problems))
    with self.assertRaisesRegex(ValueError, r'1000-1-0000\.flac: missing \.trans\.txt'):
      data.read_librispeech(os.path.join(root, 'librispeech'), 'train', strict=True)

  def test_empty_transcript_and_missing_column(self):
    root = self._copy()
    tsv = os.path.join(root, 'common_voice', 'train.tsv')
    with open(tsv) as f:
      lines = f.read().splitlines()
    columns = lines[1].split('\t')
    columns[2] = ''
    lines[1] = '\t'.join(columns)
    with open(tsv, 'w') as f:
      f.write('\n'.join(lines) + '\n')
    report = data.ReadReport()
    utterances = data.read_common_voice(os.path.join(root, 'common_voice'), 'train',
                                        report=report)
    self.assertLen(utterances, len(lines) - 2)
    self.assertEqual(report.problems, [(f'{tsv}:2', 'empty transcript')])
    with open(tsv, 'w') as f:
      f.write('client_id\tpath\n' + 'a\tb.mp3\n')
    with self.assertRaisesRegex(ValueError, r'train\.tsv:1: missing column\(s\) sentence'):
      data.read_common_voice(os.path.join(root, 'common_voice'), 'train')

  def test_manifest(self):
    root = self._copy()
    ls = data.read_librispeech(os.path.join(root, 'librispeech'), 'train')
    manifest = os.path.join(root, 'manifest.tsv')
    with open(manifest, 'w') as f:
      f.write('path\ttranscript\tspeaker\n')
      for u in ls:
        f.write(f'{os.path.relpath(u.path, root)}\t{u.transcript}\t{u.speaker}\n')
      f.write('missing.flac\thello\tx\n')
    report = data.ReadReport()
    utterances = data.read_manifest(manifest, report=report)
    self.assertEqual([(u.path, u.transcript) for u in utterances],
                     [(u.path, u.transcript) for u in ls])
    self.assertEqual(report.counts, {'missing audio file': 1})

  def test_every_line_is_counted_in_each_layout(self):
    root = self._copy()
    report = data.ReadReport()
    utterances = data.read_librispeech(os.path.join(root, 'librispeech'), 'train',
                                       report=report)
    # One account for the split: files named by chapter would name the speakers (clients).
    split_dir = os.path.join(root, 'librispeech', 'train')
    self.assertEqual(list(report.files), [split_dir])
    account = report.files[split_dir]
    account.check(split_dir)
    self.assertEqual(account.kept, len(utterances))
    self.assertEqual(account.lines, account.record_lines + account.blank)
    for speaker in self.voices:
      self.assertNotIn(f'{os.sep}{speaker}{os.sep}', ' '.join(report.lines()))
    tsv = os.path.join(root, 'common_voice', 'train.tsv')
    with open(tsv) as f:
      lines = f.read().splitlines()
    with open(tsv, 'w') as f:
      f.write('\n'.join(lines[:2] + [''] + lines[2:]) + '\n')
    report = data.ReadReport()
    utterances = data.read_common_voice(os.path.join(root, 'common_voice'), 'train',
                                        report=report)
    account = report.files[tsv]
    account.check(tsv)
    self.assertEqual((account.lines, account.header, account.blank, account.kept),
                     (len(lines) + 1, 1, 1, len(utterances)))

  def test_a_manifest_row_of_another_width_is_refused_and_a_quote_is_text(self):
    root = self._copy()
    ls = data.read_librispeech(os.path.join(root, 'librispeech'), 'train')
    manifest = os.path.join(root, 'manifest.tsv')
    rows = [f'{os.path.relpath(u.path, root)}\t{u.transcript}\t{u.speaker}' for u in ls]
    rows[0] = rows[0].replace('\t', '\t"', 1)  # a transcript that starts with a quote
    with open(manifest, 'w') as f:
      f.write('path\ttranscript\tspeaker\n' + '\n'.join(rows) + '\n')
    utterances = data.read_manifest(manifest)
    self.assertLen(utterances, len(ls))
    self.assertEqual(utterances[0].transcript, '"' + ls[0].transcript)
    with open(manifest, 'a') as f:
      f.write(f'{os.path.relpath(ls[0].path, root)}\ta\ttab\tinside\n')
    with self.assertRaisesRegex(ValueError, f'{manifest}:{len(ls) + 2}: malformed row: 4 fields, '
                                'not 3 as in the header'):
      data.read_manifest(manifest)

  def test_bad_audio_names_the_file(self):
    root = self.enterContext(tempfile.TemporaryDirectory())
    truncated = os.path.join(root, 'cut.flac')
    flac = data.read_librispeech(os.path.join(self.root, 'librispeech'), 'train')[0].path
    with open(flac, 'rb') as f, open(truncated, 'wb') as out:
      out.write(f.read()[:2000])
    # A WAV whose header claims a sample rate of 0 Hz cannot be resampled.
    zero_rate = os.path.join(root, 'zero_rate.wav')
    wav = os.path.join(root, 'ok.wav')
    subprocess.run(['sox', flac, wav], check=True)
    with open(wav, 'rb') as f:
      header = bytearray(f.read())
    header[24:28] = (0).to_bytes(4, 'little')
    with open(zero_rate, 'wb') as f:
      f.write(header)
    for path in (truncated, zero_rate, os.path.join(root, 'nothing.wav'),
                 os.path.join(root, 'x.ogg')):
      with self.assertRaisesRegex(data.AudioError, os.path.basename(path)):
        data.load_audio(path)

  def _audio_list(self, text):
    path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'list.tsv')
    with open(path, 'w') as f:
      f.write(text)
    return path

  def test_audio_list_paths_and_references(self):
    path = self._audio_list('a.wav\tHello there\n\n/abs/b.flac\tone\n')
    entries = data.read_audio_list(path)
    folder = os.path.dirname(path)
    self.assertEqual([(e.path, e.where, e.reference) for e in entries],
                     [(os.path.join(folder, 'a.wav'), f'{path}:1', 'Hello there'),
                      ('/abs/b.flac', f'{path}:3', 'one')])
    self.assertIsNone(data.read_audio_list(self._audio_list('a.wav\n'))[0].reference)

  def test_audio_list_takes_a_corpus_manifest_by_its_header(self):
    path = self._audio_list('speaker\tpath\ttranscript\n7\ta.wav\tHello there\n\n'
                            '8\t/abs/b.flac\tone\n')
    folder = os.path.dirname(path)
    self.assertEqual([(e.path, e.where, e.reference) for e in data.read_audio_list(path)],
                     [(os.path.join(folder, 'a.wav'), f'{path}:2', 'Hello there'),
                      ('/abs/b.flac', f'{path}:4', 'one')])
    # Without a transcript column: no references.
    path = self._audio_list('path\tspeaker\na.wav\t7\n')
    self.assertEqual([(e.path, e.reference) for e in data.read_audio_list(path)],
                     [(os.path.join(os.path.dirname(path), 'a.wav'), None)])
    for text, line, message in [('path\ttranscript\na.wav\tone\n\tno\n', ':3', 'empty path'),
                                ('path\ttranscript\na.wav\t \n', ':2', 'empty transcript')]:
      path = self._audio_list(text)
      with self.assertRaisesRegex(ValueError, f'{path}{line}: {message}', msg=text):
        data.read_audio_list(path)
    # Three columns and no header: the error says what a manifest needs.
    path = self._audio_list('a.wav\tone\t7\n')
    with self.assertRaisesRegex(ValueError, f'{path}:1: .*3 tab-separated fields.*header line'):
      data.read_audio_list(path)

  def test_audio_list_errors_name_file_and_line(self):
    cases = [('a.wav\tone\nb.wav\tx\ty\n', ':2', 'tab-separated'),
             ('a.wav\n\tone\n', ':2', 'empty audio path'),
             ('a.wav\t \n', ':1', 'empty reference'),
             ('a.wav\tone\nb.wav\n', ':2', 'on every line or on none'),
             ('a.wav\nb.wav\tone\n', ':2', 'on every line or on none')]
    for text, line, message in cases:
      path = self._audio_list(text)
      with self.assertRaisesRegex(ValueError, f'{path}{line}: .*{message}', msg=text):
        data.read_audio_list(path)
    for path in (self._audio_list('\n \n'), '/no/such/list.tsv'):
      with self.assertRaisesRegex(ValueError, path):
        data.read_audio_list(path)

  def test_audio_list_lines_are_counted(self):
    for text, blank in (('a.wav\tone\n\nb.wav\ttwo\n', 1),
                        ('path\ttranscript\n\na.wav\tone\nb.wav\ttwo\n', 1)):
      path = self._audio_list(text)
      report = data.ReadReport()
      self.assertLen(data.read_audio_list(path, report), 2)
      account = report.files[path]
      account.check(path)
      self.assertEqual((account.lines, account.blank, account.kept),
                       (text.count('\n'), blank, 2))


if __name__ == '__main__':
  absltest.main()
