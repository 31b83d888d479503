"""A check that a file is a PNG image of a readable size, for the report tests."""

import os

from PIL import Image

_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def assert_png(test, png_path):
  """Fails `test` unless `png_path` is a whole PNG image larger than 300 x 200 pixels."""
  test.assertTrue(os.path.isfile(png_path), png_path)
  with open(png_path, 'rb') as f:
    test.assertEqual(f.read(8), _PNG_SIGNATURE)
  with Image.open(png_path) as image:
    test.assertEqual(image.format, 'PNG')
    width, height = image.size
    image.verify()
  test.assertGreater(width, 300)
  test.assertGreater(height, 200)
