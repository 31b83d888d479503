r"""Ask a trained retriever for the top-K documents of queries.

  python -m experiments.retrieve --model=/tmp/retriever/model.npz "my phone will not charge"
  python -m experiments.retrieve --model=/tmp/retriever/model.npz --queries_file=queries.txt \
      --format=jsonl --top_k=5
  echo "a recipe with chocolate" | python -m experiments.retrieve --model=...
  python -m experiments.retrieve --model=/tmp/retriever/model.npz --export_dir=/tmp/retriever_sm

Loads the `model.npz` a `train_retriever` run wrote (`fedasr_tff.retrieval.load_retriever`:
its tensors, class names and backbone), reads the queries from the arguments, else
--queries_file (one a line), else standard input, and prints each query's top-K documents with
their scores (softmax probabilities over the classes): as text, or as JSON lines
(`{"query": ..., "documents": [{"rank", "id", "name", "score"[, "text"]}]}`). A class is the
document it stands for; --documents gives each class's text (a TSV of `class<TAB>text`), printed
beside its name.

--export_dir writes the retriever as a SavedModel instead (string queries in; ids, names and
scores out; the tokenizer inside): `import tensorflow_text` before `tf.saved_model.load` (its ops
are the tokenizer's), then `loaded.signatures['serving_default'](tf.constant([...]))`. WordPiece
backbones (MiniLM, BERT) only: a Llama backbone's tokenizer is not TensorFlow ops, so its
retriever answers queries here but is not exported.

Runs no TFF computation.
"""

import json
import sys

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from fedasr_tff import reading
from fedasr_tff.retrieval import retriever as retriever_lib

_MODEL = flags.DEFINE_string('model', None, 'The `model.npz` of a train_retriever run.')
_TOP_K = flags.DEFINE_integer('top_k', None, 'Documents per query (default 3, or the number of '
                              'classes if fewer).', lower_bound=1)
_QUERIES_FILE = flags.DEFINE_string('queries_file', None, 'Queries, one a line (UTF-8, blank '
                                    'lines skipped); default: the arguments, else standard '
                                    'input.')
_FORMAT = flags.DEFINE_enum('format', 'text', ['text', 'jsonl'], 'Output: text, or one JSON '
                            'object a line.')
_DOCUMENTS = flags.DEFINE_string('documents', None, 'A TSV of `class<TAB>document text`: the '
                                 'text printed beside each retrieved class.')
_EXPORT_DIR = flags.DEFINE_string('export_dir', None, 'Write the retriever as a SavedModel here '
                                  'and answer no query.')


def _queries(argv):
  """The queries: the arguments, else --queries_file's lines, else standard input's; blank lines
  of a file are skipped, a blank argument refused, and no query at all is refused."""
  if len(argv) > 1:
    if _QUERIES_FILE.value:
      raise app.UsageError('Give queries as arguments or --queries_file, not both.')
    for position, query in enumerate(argv[1:], start=1):
      if not query.strip():
        raise app.UsageError(f'query {position} (argument {position}) is empty: give each query '
                             'as text.')
    return [query.strip() for query in argv[1:]]
  if _QUERIES_FILE.value:
    source = f'--queries_file {_QUERIES_FILE.value}'
    try:
      lines = reading.split_lines(reading.read_text(_QUERIES_FILE.value))
    except ValueError as e:
      raise app.UsageError(f'--queries_file: {e}') from e
  else:
    source = 'standard input'
    lines = reading.split_lines(sys.stdin.read())
  queries = [line.strip() for line in lines if line.strip()]
  if not queries:
    raise app.UsageError(f'No query read from {source} ({len(lines)} line(s), all blank): give '
                         'queries as arguments, in --queries_file, or on standard input, one a '
                         'line.')
  return queries


def _documents(class_names):
  """{class: its text} of --documents, a `CLASS<TAB>TEXT` file (text after the first tab)."""
  if _DOCUMENTS.value is None:
    return {}
  path = _DOCUMENTS.value
  try:
    lines = reading.split_lines(reading.read_text(path))
  except ValueError as e:
    raise app.UsageError(f'--documents: {e}') from e
  texts, where = {}, {}
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    name, tab, text = line.partition('\t')
    name = name.strip()
    if not tab:
      raise app.UsageError(f'--documents {path}:{number}: expected CLASS<TAB>TEXT, found no tab.')
    if name in texts:
      raise app.UsageError(f'--documents {path}:{number}: class {name!r} again (first at line '
                           f'{where[name]}): give each class one text.')
    texts[name], where[name] = text.strip(), number
  unknown = sorted(set(texts) - set(class_names))
  if unknown:
    raise app.UsageError(f'--documents {path} names classes the retriever does not have: '
                         f'{", ".join(unknown[:5])} (line {where[unknown[0]]}).')
  return texts


def main(argv):
  common.start_binary(tff_computations=False,
                      distributed_refusal='retrieval runs no TFF computation.')
  common.require('model')
  if _EXPORT_DIR.value:
    cli.check_output('export_dir', _EXPORT_DIR.value)
  try:
    retriever = retriever_lib.load_retriever(_MODEL.value, _TOP_K.value)
  except ValueError as e:
    raise app.UsageError(f'{"--top_k" if str(e).startswith("`k`") else "--model"}: {e}') from e
  if _EXPORT_DIR.value:
    if len(argv) > 1 or _QUERIES_FILE.value:
      raise app.UsageError('--export_dir answers no query: give no queries with it.')
    try:
      retriever_lib.export_saved_model(retriever, _EXPORT_DIR.value)
    except ValueError as e:
      raise app.UsageError(f'--export_dir: {e}') from e
    print(f'SavedModel written to {_EXPORT_DIR.value} (load it after `import tensorflow_text`)')
    return
  documents = _documents(retriever.class_names)
  queries = _queries(argv)
  for query, retrieved in zip(queries, retriever.retrieve_texts(queries), strict=True):
    for rank, document in enumerate(retrieved, start=1):
      document['rank'] = rank
      if document['name'] in documents:
        document['text'] = documents[document['name']]
    if _FORMAT.value == 'jsonl':
      print(json.dumps({'query': query, 'documents': retrieved}, ensure_ascii=False))
      continue
    print(f'query: {query}')
    for document in retrieved:
      text = f'  {document["text"]}' if 'text' in document else ''
      print(f'  {document["rank"]}. {document["name"]}  {document["score"]:.3f}{text}')


if __name__ == '__main__':
  cli.run(main)
