"""The end-of-run report of a retriever run: scores, per-class table, confusion matrix, privacy.

Written by `experiments/train_retriever.py` beside the run's files; the speech runs' report and
the helpers both use (figures, sections, the input files) are `report`'s.
"""

import os
from typing import Mapping
from typing import Optional
from typing import Sequence

from matplotlib import figure as mpl_figure
import numpy as np

from experiments import report

# The largest number of classes drawn as a confusion matrix (the issue's ~20: beyond, the labels
# no longer fit); above it the report lists the most confused pairs.
MAX_CONFUSION_CLASSES = 20


def plot_confusion(confusion: np.ndarray, class_names: Sequence[str], png_path: str) -> str:
  """Draws a confusion matrix (rows: true class, columns: top-1 prediction), each row as the
  fraction of its class's examples, with the counts written in the cells.

  Returns:
    `png_path`.
  """
  confusion = np.asarray(confusion)
  rows = confusion.sum(axis=1, keepdims=True)
  shares = np.divide(confusion, rows, out=np.zeros(confusion.shape), where=rows > 0)
  size = 2.5 + 0.45 * len(class_names)
  fig = mpl_figure.Figure(figsize=(size + 1.5, size))
  axes = fig.add_subplot()
  image = axes.imshow(shares, cmap='Blues', vmin=0.0, vmax=1.0)
  fig.colorbar(image, ax=axes, label='fraction of the true class')
  ticks = np.arange(len(class_names))
  axes.set_xticks(ticks, class_names, rotation=60, ha='right', fontsize=8)
  axes.set_yticks(ticks, class_names, fontsize=8)
  axes.set_xlabel('predicted (top-1)')
  axes.set_ylabel('true class')
  for (i, j), count in np.ndenumerate(confusion):
    if count:
      axes.text(j, i, str(count), ha='center', va='center', fontsize=7,
                color='white' if shares[i, j] > 0.5 else 'black')
  fig.tight_layout()
  return report.save_figure(fig, png_path)


def write_retriever_report(output_dir: str, *, title: str, scores, class_names: Sequence[str],
                           privacy_statement: str, notes: Sequence[str] = (),
                           inputs: Optional[Mapping[str, Mapping[str, object]]] = None) -> str:
  """Writes `output_dir/report.md` of a retriever run: top-1, top-K and macro-F1 first, the
  per-class precision, recall and F1, the confusion matrix (`confusion.png`, up to
  `MAX_CONFUSION_CLASSES` classes; the most confused pairs beyond), the privacy statement, and
  the input files (`report.input_section`) if `inputs` are given.

  Args:
    output_dir: the run's folder.
    title: the report's title.
    scores: the final model's `fedasr_tff.retrieval.classification_report.Scores`.
    class_names: the name of each class.
    privacy_statement: Markdown, inserted as it is.
    notes: one bullet each.
    inputs: as in `report.input_section`.

  Returns:
    The path of report.md.
  """
  lead = (f'**Top-1 {100 * scores.top1:.1f}%, top-{scores.k} {100 * scores.topk:.1f}% (K = '
          f'{scores.k}: the documents retrieved per query), macro-F1 {100 * scores.macro_f1:.1f}%'
          f' on {int(scores.support.sum())} held-out examples of {len(class_names)} classes.** '
          "Each example's top-K classes: `predictions.tsv`.")
  rows = ['| class | held-out examples | precision (%) | recall (%) | F1 (%) |',
          '|---|---|---|---|---|']
  for name, support, precision, recall, f1 in zip(class_names, scores.support, scores.precision,
                                                   scores.recall, scores.f1, strict=True):
    rows.append(f'| {name} | {support} | {100 * precision:.1f} | {100 * recall:.1f} | '
                f'{100 * f1:.1f} |')
  sections = [f'# {title}', '## Results', lead, '### Per class', '\n'.join(rows),
              '### Confusion matrix']
  if len(class_names) <= MAX_CONFUSION_CLASSES:
    plot_confusion(scores.confusion, class_names, os.path.join(output_dir, 'confusion.png'))
    sections.append('![Confusion matrix](confusion.png)')
  else:
    errors = scores.confusion.copy()
    np.fill_diagonal(errors, 0)
    pairs = [(count, i, j) for (i, j), count in np.ndenumerate(errors) if count]
    pairs.sort(key=lambda pair: (-pair[0], pair[1], pair[2]))
    listed = '\n'.join(f'- {class_names[i]} → {class_names[j]}: {count}'
                       for count, i, j in pairs[:10]) or '- none'
    sections.append(f'Not drawn for more than {MAX_CONFUSION_CLASSES} classes. The most '
                    f'frequent confusions (true → predicted: examples):\n\n{listed}')
  sections += ['## Privacy', privacy_statement.strip()]
  if inputs:
    sections += ['## Input files', report.input_section(inputs)]
  return report.write_sections(output_dir, sections, notes)
