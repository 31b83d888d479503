"""CTC loss and greedy decoding for the transformer's logits ([1], Sec. 4 and App. F).

Token ids are 1..V and 0 is the CTC blank (`BLANK_INDEX`); logits have V + 1 classes.

References:
[1] M. Pelikan, S. S. Azam, V. Feldman, J. Silovsky, K. Talwar, C. G. Brinton,
    T. Likhomanenko. Enabling Differentially Private Federated Learning for Speech
    Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping. NeurIPS 2025,
    arXiv:2310.00098.
"""

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
  """Best-path decoding: argmax per frame, repeats merged, blanks removed; [B, None] ids."""
  decoded, _ = tf.nn.ctc_greedy_decoder(
      tf.transpose(logits, [1, 0, 2]),
      tf.cast(logit_lengths, tf.int32),
      merge_repeated=True,
      blank_index=BLANK_INDEX)
  return tf.RaggedTensor.from_sparse(decoded[0])
