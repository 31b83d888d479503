"""A one-layer linear regression model (mean squared error) on 3 features, for tests of
processes whose arithmetic only needs some model."""

import tensorflow as tf
import tensorflow_federated as tff

FEATURES = 3


def model_fn() -> tff.learning.models.VariableModel:
  """The model: batches of (x [B, 3], y [B, 1])."""
  keras_model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
                                     tf.keras.layers.Dense(1)])
  return tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.MeanSquaredError(),
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None, 1], tf.float32)))
