r"""Federated training of the soft-embedding adapter and classifier-as-retriever.

  python -m experiments.train_retriever --output_dir=/tmp/retriever --num_clients=3 \
      --rounds=5 --local_epochs=2 --local_dp=adaptive --noise_multiplier=0.1

A frozen language model (default the pretrained all-MiniLM-L6-v2; --checkpoint_dir for a Hugging
Face BERT or Llama checkpoint), a classifier head whose top-K classes are the retrieved documents
and, with --mode=adapter_classifier, a d x d adapter on the token embeddings, trained with FedAvg
and local DP (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc
Adapter Insertions: The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI
2025). The default corpus is Debian's fortunes (`make setup` installs it): each category is a
document to retrieve. --central_dp is the alternative with a meaningful guarantee. Started again
with the same flags and --output_dir, a run resumes from its latest checkpoint. With
--mips_baseline the binary only prints the MIPS baseline on the frozen model (class prototypes
of the training queries, scored by inner product; the paper's Sec. 6.2 baseline).

Writes to --output_dir: `report.md` (top-1, top-K and macro-F1, per-class precision and recall,
the confusion matrix as `confusion.png` up to 20 classes), `predictions.tsv` (each held-out
example's top-K classes with their probabilities, owner-only), `metrics.csv`, `summary.json`,
`model.npz` (named tensors) and the checkpoints.

Every flag that configures the run is a field of
`fedasr_tff.retrieval.retriever_config.RetrieverConfig` (same name, default and help).
"""

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import retriever_report
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.retrieval import retriever_config
from fedasr_tff.retrieval import training

config_flags.define_flags(retriever_config.RetrieverConfig, [
    name for name in fields_lib.config_fields(retriever_config.RetrieverConfig)
    if name != 'output_dir'])  # `common`'s, as every binary's.
_CLIENTS_IN_PARALLEL = flags.DEFINE_integer(
    'clients_in_parallel', None, 'Clients the TFF runtime trains concurrently (default: 2 '
    'with --engine=inprocess, no limit on a TFF worker). In the adapter mode each needs '
    'memory for its activations through the backbone '
    '(whose weights the clients share): bound it to fit memory.', lower_bound=1)
_MIPS = flags.DEFINE_bool('mips_baseline', False, 'Print the MIPS baseline (class prototypes of '
                          'the frozen model\'s features) and exit; no training, no DP.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  workers = common.start_binary(max_concurrent_computation_calls=_CLIENTS_IN_PARALLEL.value)
  common.require('output_dir')
  with config_flags.flag_errors():
    config = config_flags.config_from_flags(retriever_config.RetrieverConfig)
    if _MIPS.value:
      print(f'MIPS on the frozen model: {training.mips_baseline(config)}')
      return
    result = training.train(config, show_progress=common.PROGRESS.value)
  metrics = result.metrics
  print('final ' + ' '.join(f'{k} {100 * v:.2f}%' for k, v in metrics['eval'].items()) +
        f' on {metrics["test_examples"]} held-out examples of {metrics["num_classes"]} classes')
  if result.features_cached:
    print(f'features read from the cache ({config.feature_cache}) in '
          f'{result.feature_seconds:.1f} s')
  elif result.feature_seconds:
    print(f'features computed once in {result.feature_seconds:.1f} s' + (
        f', cached in {config.feature_cache}' if config.feature_cache else ''))
  if result.round_seconds:
    print(f'median round time {metrics["median_round_seconds"]:.3f} s')
  statement = common.with_trust_statement(result.privacy_statement, workers)
  print(statement)
  corpus = config.corpus_path or config.corpus
  path = retriever_report.write_retriever_report(
      config.output_dir, title=f'Classifier-as-retriever on {corpus}', scores=result.scores,
      class_names=result.class_names, privacy_statement=statement,
      notes=[f'{metrics["test_examples_left_out"]} examples of --test_path were left out: '
             'their classes are not among the training corpus\'s.']
      if metrics.get('test_examples_left_out') else [], inputs=metrics.get('inputs'))
  print(f'report: {path}')


if __name__ == '__main__':
  cli.run(main)
