from absl.testing import absltest
from absl.testing import parameterized

from fedasr_tff.speech import data


class NormalizeTest(parameterized.TestCase):

  @parameterized.parameters(
      ('Hello, World!', 'en', 'hello world'),
      ("Don’t  stop—the well-known café.", 'en', "don't stop the well-known cafe"),
      ('Straße Œuvre Ærø', 'en', 'strasse oeuvre aero'),
      ("L’école d’été, à Noël!", 'fr', "l'école d'été à noël"),
      ('Größe über Maß.', 'de', 'größe über maß'),
      ('  "quoted"  (text) ', 'en', 'quoted text'),
      ('Room 101!', 'en', 'room 101'),  # Digits stay, to be counted as out of vocabulary.
  )
  def test_examples(self, text, language, want):
    self.assertEqual(data.normalize_transcript(text, language), want)

  def test_unknown_language(self):
    with self.assertRaisesRegex(ValueError, 'language'):
      data.normalize_transcript('x', 'es')


class VocabularyTest(absltest.TestCase):

  def test_english_has_29_tokens_and_blank_zero(self):
    vocab = data.Vocabulary('en')
    self.assertEqual(vocab.size, 29)
    ids, unknown = vocab.encode("it's a well-known cat")
    self.assertNotIn(0, ids)
    self.assertEmpty(unknown)
    self.assertEqual(vocab.decode(ids), "it's a well-known cat")
    self.assertEqual(vocab.decode([0] + ids + [0]), "it's a well-known cat")

  def test_languages_extend_the_letters(self):
    self.assertEqual(data.Vocabulary('de').size, 33)
    self.assertGreater(data.Vocabulary('fr').size, 29)
    ids, unknown = data.Vocabulary('de').encode('größe')
    self.assertEmpty(unknown)
    self.assertEqual(data.Vocabulary('de').decode(ids), 'größe')

  def test_out_of_vocabulary_characters_are_counted(self):
    ids, unknown = data.Vocabulary('en').encode('room 101 é')
    self.assertEqual(unknown, {'1': 2, '0': 1, 'é': 1})
    self.assertEqual(data.Vocabulary('en').decode(ids), 'room')


if __name__ == '__main__':
  absltest.main()
