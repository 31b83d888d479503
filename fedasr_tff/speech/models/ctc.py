"""CTC loss and decoding for the transformer's logits.

Connectionist temporal classification (Graves, Fernández, Gomez and Schmidhuber, "Connectionist
Temporal Classification: Labelling Unsegmented Sequence Data with Recurrent Neural Networks",
ICML 2006), the loss of Pelikan et al., "Enabling Differentially Private Federated Learning for
Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098, Sec. 4. Token ids are 1..V and 0 is the CTC blank (`BLANK_INDEX`); logits have
V + 1 classes.
"""

from typing import List
from typing import Sequence
from typing import Tuple

import tensorflow as tf

BLANK_INDEX = 0


def ctc_loss(labels: tf.Tensor, label_lengths: tf.Tensor, logits: tf.Tensor,
             logit_lengths: tf.Tensor) -> tf.Tensor:
  """Mean over utterances of the per-utterance CTC negative log-likelihood.

  Args:
    labels: [B, L] int token ids (1..V), padded beyond `label_lengths`.
    label_lengths: [B] valid label lengths.
    logits: [B, T, V + 1] unnormalised scores.
    logit_lengths: [B] valid frames.

  Returns:
    The scalar mean loss.
  """
  losses = tf.nn.ctc_loss(
      labels=tf.cast(labels, tf.int32),
      logits=logits,
      label_length=tf.cast(label_lengths, tf.int32),
      logit_length=tf.cast(logit_lengths, tf.int32),
      logits_time_major=False,
      blank_index=BLANK_INDEX)
  return tf.reduce_mean(losses)


def greedy_decode(logits: tf.Tensor, logit_lengths: tf.Tensor) -> tf.RaggedTensor:
  """Best-path decoding (Graves et al. 2006, Sec. 3.2): the most probable frame labelling.

  Args:
    logits: [B, T, V + 1] scores.
    logit_lengths: [B] valid frames.

  Returns:
    [B, None] ragged ids: argmax per frame, repeats merged, blanks removed.
  """
  return greedy_decode_with_scores(logits, logit_lengths)[0]


def greedy_decode_with_scores(logits: tf.Tensor,
                              logit_lengths: tf.Tensor) -> Tuple[tf.RaggedTensor, tf.Tensor]:
  """`greedy_decode` with the scores of the best paths.

  Args:
    logits: [B, T, V + 1] scores.
    logit_lengths: [B] valid frames.

  Returns:
    ([B, None] ragged ids, [B] scores Σ_t max_k logits[t, k]). The score is TF's negated
    `neg_sum_logits`: a sum of raw logits, comparable between paths of one utterance only (for a
    log-probability, pass log-softmax outputs as `logits`).
  """
  decoded, neg_sum_logits = tf.nn.ctc_greedy_decoder(
      tf.transpose(logits, [1, 0, 2]),
      tf.cast(logit_lengths, tf.int32),
      merge_repeated=True,
      blank_index=BLANK_INDEX)
  return (tf.RaggedTensor.from_sparse(decoded[0]), -neg_sum_logits[:, 0])


def check_beam_arguments(beam_width: int, top_paths: int) -> None:
  """Checks `beam_search_decode`'s `beam_width` and `top_paths`.

  Args:
    beam_width: prefixes kept per frame, >= 1.
    top_paths: sequences returned per utterance, 1 <= top_paths <= beam_width.

  Raises:
    ValueError: naming the argument, for a `beam_width` < 1 or a `top_paths` outside
      [1, `beam_width`].
  """
  if not isinstance(beam_width, int) or beam_width < 1:
    raise ValueError(f'`beam_width` must be an integer >= 1, got {beam_width!r}.')
  if not isinstance(top_paths, int) or not 1 <= top_paths <= beam_width:
    raise ValueError(f'`top_paths` must be an integer in [1, `beam_width`={beam_width}], got '
                     f'{top_paths!r}.')


def beam_search_decode(logits: tf.Tensor, logit_lengths: tf.Tensor, beam_width: int,
                       top_paths: int = 1) -> Tuple[List[tf.RaggedTensor], tf.Tensor]:
  """The `top_paths` most probable label sequences found by prefix beam search.

  Searches for y* = argmax_y Σ_{paths π -> y} Π_t softmax(logits_t)[π_t] with TF's prefix beam
  search (Graves et al. 2006, Sec. 3.2), which keeps the `beam_width` best prefixes per frame
  (exact when no prefix it needs is pruned). It can differ from `greedy_decode`: with two frames
  of p(blank) = 0.6, p(a) = 0.4 the best path is "" (0.36) but "a" has probability
  0.4·0.4 + 2·0.6·0.4 = 0.64.

  `tf.nn.ctc_beam_search_decoder` takes the last class as the blank, so the logits are rotated
  to put our blank (id 0) last and the decoded ids shifted back to 1..V.

  Args:
    logits: [B, T, V + 1] unnormalised scores (softmax over the last axis).
    logit_lengths: [B] valid frames.
    beam_width: prefixes kept per frame (>= 1); 1 keeps only the best prefix.
    top_paths: sequences returned per utterance, 1 <= top_paths <= beam_width.

  Returns:
    A list of `top_paths` [B, None] ragged id tensors, best first, and their [B, top_paths]
    log-probabilities log p(y | logits) (as summed by the beam; -inf where fewer were found).

  Raises:
    ValueError: for a `beam_width` or `top_paths` out of range.
  """
  check_beam_arguments(beam_width, top_paths)
  rotated = tf.concat([logits[..., BLANK_INDEX + 1:], logits[..., :BLANK_INDEX + 1]], axis=-1)
  decoded, log_probabilities = tf.nn.ctc_beam_search_decoder(
      tf.transpose(rotated, [1, 0, 2]), tf.cast(logit_lengths, tf.int32),
      beam_width=beam_width, top_paths=top_paths)
  paths = [tf.RaggedTensor.from_sparse(tf.SparseTensor(d.indices, d.values + 1, d.dense_shape))
           for d in decoded]
  return paths, log_probabilities


def ids_to_texts(ids: tf.RaggedTensor, tokens: Sequence[str]) -> tf.Tensor:
  """The texts of decoded token ids.

  The same text as `data.Vocabulary.decode`: ids outside 1..V are dropped, runs of the word
  boundary collapse to one space and none is kept at either end.

  Args:
    ids: [B, None] token ids (1..V).
    tokens: the vocabulary's tokens (blank excluded).

  Returns:
    [B] strings.
  """
  table = tf.constant([''] + list(tokens))
  valid = tf.ragged.boolean_mask(ids, (ids >= 1) & (ids <= len(tokens)))
  texts = tf.strings.reduce_join(tf.gather(table, valid), axis=-1)
  return tf.strings.strip(tf.strings.regex_replace(texts, ' +', ' '))
