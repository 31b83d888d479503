"""DGA-RL: aggregation weights from a small network trained with rewards.

Dimitriadis, Kumatani, Gmyr, Gaur and Eskimez, "Federated Transfer Learning with Dynamic
Gradient Aggregation", arXiv:2008.02452, Sec. 3.2 and Algorithm 2. Each round, after the clients
report (`dga.DGAProcess.client_round`):

    x = standardised features of the N clients, concat_j [L_j, mean|Δ_j|, var|Δ_j|]   (3N)
    a = RL(x)                       N weights (the network's softmax, sampled for exploration)
    b = DGA softmax weights         (`dga.SoftmaxWeighting`, as the process computes them)
    candidates A, B = one server step with a, with b, both from the *same* state (the process's
                      own aggregator and server optimizer, `DGAProcess.server_step`)
    e_A, e_B = validation errors of the candidates (lower is better; the paper's CER)
    keep A or B and reward the network (`reward`); commit the kept candidate's model *and*
    optimizer state; push (x, sample, r) to a replay buffer of 1,000; train the network on a
    minibatch of 32 (`WeightPolicy`).

Privacy. The features are un-noised client statistics and every round chooses between two
models by their error on validation data: DGA-RL has no DP argument, and runs with DP noise
refuse it (`speech.config`).
"""

import collections
import dataclasses
from typing import Any
from typing import Callable
from typing import List
from typing import Optional
from typing import Tuple

import numpy as np
import tensorflow as tf

from fedasr_tff import validation

BUFFER_CAPACITY, BATCH_SIZE = 1000, 32
HIDDEN_UNITS = (512, 512, 512, 64)
# The reward of "about equal", as a fraction of R.
TIE_REWARD = 0.1


def reward(error_a: float, error_b: float, theta: float,
           reward_scale: float = 1.0) -> Tuple[bool, float]:
  """Which candidate to keep, and the network's reward.

  e_B − e_A > θ: keep A, r = +R; |e_A − e_B| <= θ: keep A, r = +0.1 R; otherwise keep B,
  r = −R. Read literally, the paper's pseudocode rewards the RL weights when they are worse
  (CER_A − CER_B > θ gives +R); its prose says +1 when the inferred weights give a better CER,
  −1 when worse and +0.1 when similar, which this follows.

  Args:
    error_a: e_A, the validation error of the candidate with the RL weights.
    error_b: e_B, that of the candidate with the softmax weights.
    theta: θ >= 0, the tolerance of "about equal".
    reward_scale: R > 0.

  Returns:
    (whether to keep the RL candidate A, the reward r).
  """
  if error_b - error_a > theta:
    return True, reward_scale
  if abs(error_a - error_b) <= theta:
    return True, TIE_REWARD * reward_scale
  return False, -reward_scale


class ReplayBuffer:
  """FIFO memory of (features, action, reward); minibatches drawn without replacement."""

  def __init__(self, capacity: int = BUFFER_CAPACITY):
    """Initializes an empty buffer.

    Args:
      capacity: the most entries kept, a positive integer.
    """
    validation.check_positive_integer('capacity', capacity)
    self._entries = collections.deque(maxlen=capacity)

  def __len__(self) -> int:
    return len(self._entries)

  @property
  def capacity(self) -> int:
    """The most entries kept."""
    return self._entries.maxlen

  @property
  def entries(self) -> List[Any]:
    """The entries, oldest first."""
    return list(self._entries)

  def push(self, entry) -> None:
    """Adds `entry`, dropping the oldest when full.

    Args:
      entry: a (features, action, reward) tuple.
    """
    self._entries.append(entry)

  def sample(self, rng: np.random.Generator, batch_size: int = BATCH_SIZE) -> List[Any]:
    """Draws a minibatch of distinct entries, uniformly.

    Args:
      rng: the generator drawing the entries.
      batch_size: the most entries to draw, a positive integer.

    Returns:
      min(`batch_size`, len) distinct entries.
    """
    validation.check_positive_integer('batch_size', batch_size)
    picks = rng.choice(len(self._entries), size=min(batch_size, len(self._entries)),
                       replace=False)
    return [self._entries[i] for i in picks]


def build_weight_network(num_clients: int, hidden_units=HIDDEN_UNITS,
                         seed: int = 0) -> tf.keras.Sequential:
  """The weight network: 3N inputs, ReLU hidden layers, N logits.

  The default is 5 dense layers, the 4th (second to last) a bottleneck: 3N-512-512-512-64-N (the
  paper gives only "5 layers, bottleneck, input 3N, output N"). Its inputs are fixed slots, so N
  must be the same every round (a fixed-size cohort, with or without replacement), and it is not
  permutation-equivariant. `WeightPolicy.weights` applies the softmax.

  Args:
    num_clients: N, the fixed cohort size.
    hidden_units: the hidden layers' widths.
    seed: seed of the Glorot initialisers (layer i uses seed + i).

  Returns:
    An uncompiled `tf.keras.Sequential`.
  """
  validation.check_positive_integer('num_clients', num_clients)
  layers = [tf.keras.layers.InputLayer(input_shape=(3 * num_clients,))]
  for i, units in enumerate(hidden_units):
    layers.append(tf.keras.layers.Dense(
        units, activation='relu',
        kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + i)))
  layers.append(tf.keras.layers.Dense(
      num_clients, kernel_initializer=tf.keras.initializers.GlorotUniform(
          seed=seed + len(hidden_units))))
  return tf.keras.Sequential(layers)


def standardized_features(features) -> np.ndarray:
  """The network's input from the clients' features.

  Each feature is z-scored across the round's N clients (the paper does not say how it scales
  them).

  Args:
    features: the clients' [N, 3] features (`dga.client_features`).

  Returns:
    float32 [3N]: each column z-scored across the clients (a constant column becomes 0),
    flattened client by client: [L_1, m_1, v_1, L_2, ...].

  Raises:
    ValueError: if `features` is not [N, 3].
  """
  features = np.asarray(features, np.float64)
  if features.ndim != 2 or features.shape[1] != 3:
    raise ValueError(f'`features` must have shape [N, 3], got {features.shape}.')
  std = features.std(axis=0)
  centred = features - features.mean(axis=0)
  scaled = np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)
  return scaled.reshape([-1]).astype(np.float32)


class WeightPolicy:
  """The weight network, its exploration and its REINFORCE training.

  The paper says "active RL" and no more about the training rule; ours is a contextual-bandit
  REINFORCE: the network gives logits μ = f(x), the action is u = μ + s·ε with ε ~ N(0, I) and
  exploration s (annealed), a = softmax(u); the loss of a minibatch is
  mean_b r_b ||u_b − f(x_b)||² / (2 s²) (the negative log-likelihood of u under N(f(x), s² I),
  times the reward), minimised with Adam.
  """

  def __init__(self, num_clients: int, *, exploration: float = 0.1,
               exploration_decay: float = 0.995, min_exploration: float = 0.01,
               learning_rate: float = 1e-3, hidden_units=HIDDEN_UNITS, seed: int = 0):
    """Builds the network and its optimizer.

    Args:
      num_clients: N, the fixed cohort size.
      exploration: the initial s > 0.
      exploration_decay: the factor in (0, 1] applied to s after every update.
      min_exploration: the floor > 0 of s.
      learning_rate: Adam's learning rate.
      hidden_units: the network's hidden layers (`build_weight_network`).
      seed: seed of the network's initialisation.
    """
    validation.check_positive('exploration', exploration)
    validation.check_sampling_rate('exploration_decay', exploration_decay)
    validation.check_positive('min_exploration', min_exploration)
    validation.check_positive('learning_rate', learning_rate)
    self.num_clients = num_clients
    self.network = build_weight_network(num_clients, hidden_units, seed)
    self.optimizer = tf.keras.optimizers.Adam(learning_rate)
    # Built now, so its variables exist (and can be restored) before the first update.
    self.optimizer.build(self.network.trainable_variables)
    self.exploration = float(exploration)
    self._decay = float(exploration_decay)
    self._min_exploration = float(min_exploration)

  def optimizer_variables(self) -> List[tf.Variable]:
    """Returns the optimizer's variables, for a checkpoint."""
    return list(self.optimizer.variables)

  def logits(self, features) -> tf.Tensor:
    """The network's logits f(x).

    Args:
      features: one or more standardised feature vectors of 3N entries.

    Returns:
      float32 [batch, N].
    """
    return self.network(tf.reshape(tf.cast(features, tf.float32), [-1, 3 * self.num_clients]))

  def weights(self, features) -> np.ndarray:
    """The greedy weights of one feature vector.

    Args:
      features: a standardised feature vector of 3N entries.

    Returns:
      softmax(f(x)), N weights.
    """
    return tf.nn.softmax(self.logits(features))[0].numpy()

  def act(self, features, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """Samples the exploring weights of one feature vector.

    Args:
      features: a standardised feature vector of 3N entries.
      rng: the generator of the exploration noise ε.

    Returns:
      (weights a = softmax(u), action u = f(x) + s·ε).
    """
    mu = self.logits(features)[0].numpy()
    u = (mu + self.exploration * rng.standard_normal(mu.shape)).astype(np.float32)
    return tf.nn.softmax(u).numpy(), u

  def update(self, batch) -> float:
    """One Adam step on mean_b r_b ||u_b − f(x_b)||² / (2 s²); then anneals s.

    Args:
      batch: (features x, action u, reward r) entries of the replay buffer.

    Returns:
      The minibatch's loss.
    """
    features = tf.constant(np.stack([entry[0] for entry in batch]), tf.float32)
    actions = tf.constant(np.stack([entry[1] for entry in batch]), tf.float32)
    rewards = tf.constant([entry[2] for entry in batch], tf.float32)
    with tf.GradientTape() as tape:
      squared = tf.reduce_sum(tf.square(actions - self.network(features)), axis=1)
      loss = tf.reduce_mean(rewards * squared) / (2.0 * self.exploration**2)
    grads = tape.gradient(loss, self.network.trainable_variables)
    self.optimizer.apply_gradients(zip(grads, self.network.trainable_variables, strict=True))
    self.exploration = max(self._min_exploration, self.exploration * self._decay)
    return float(loss)


@dataclasses.dataclass(frozen=True)
class RLRound:
  """What one DGA-RL round decided.

  Attributes:
    state: the committed process state (after rehearsal, if any).
    measurements: the round's measurements (`client_work`, `aggregator`, `finalizer`, and
      `rehearsal`) as the kept candidate's `next` would have reported them.
    rl_weights: the normalised weights a, in cohort order.
    softmax_weights: the normalised weights b, in cohort order.
    errors: (e_A, e_B), the candidates' validation errors.
    kept_rl: whether A (the RL weights) was kept.
    reward: the reward.
  """
  state: Any
  measurements: Any
  rl_weights: np.ndarray
  softmax_weights: np.ndarray
  errors: Tuple[float, float]
  kept_rl: bool
  reward: float


class DGARL:
  """Runs DGA-RL rounds of a `dga.DGAProcess` (module docstring).

  Args:
    process: the DGA process (its `weighting` gives the softmax weights b).
    num_clients: N, the fixed cohort size.
    validation_error: model weights -> validation error (lower is better).
    theta: θ >= 0 of the reward.
    reward_scale: R > 0.
    batch_size: the minibatch of each network update.
    buffer_capacity: the replay buffer's size.
    seed: seed of the network's initialisation and of the exploration.
    **policy_kwargs: `WeightPolicy`'s exploration and learning rate.
  """

  def __init__(self, process, num_clients: int,
               validation_error: Callable[[Any], float], *, theta: float = 0.001,
               reward_scale: float = 1.0, batch_size: int = BATCH_SIZE,
               buffer_capacity: int = BUFFER_CAPACITY, seed: int = 0, **policy_kwargs):
    validation.check_non_negative('theta', theta)
    validation.check_positive('reward_scale', reward_scale)
    validation.check_positive_integer('batch_size', batch_size)
    if getattr(process, 'client_round', None) is None:
      raise ValueError('DGA-RL needs the `client_round` stage of its `process`: build it with '
                       '`build_dga_process(..., with_client_round=True)`.')
    self._process = process
    self._validation_error = validation_error
    self._theta = float(theta)
    self._reward_scale = float(reward_scale)
    self._batch_size = batch_size
    self.policy = WeightPolicy(num_clients, seed=seed, **policy_kwargs)
    self.buffer = ReplayBuffer(buffer_capacity)
    self._seed = seed
    self._rounds = 0

  def state(self) -> List[np.ndarray]:
    """The learner's state as arrays, for a checkpoint.

    Exploration noise and minibatches are drawn from (seed, round), so no RNG state is kept.

    Returns:
      The network's weights, the optimizer's variables, the exploration, and the replay buffer
      (features, actions, rewards) padded to its capacity, then its fill.
    """
    n, capacity = self.policy.num_clients, self.buffer.capacity
    features = np.zeros([capacity, 3 * n], np.float32)
    actions = np.zeros([capacity, n], np.float32)
    rewards = np.zeros([capacity], np.float32)
    for i, (x, u, r) in enumerate(self.buffer.entries):
      features[i], actions[i], rewards[i] = x, u, r
    return ([np.asarray(w) for w in self.policy.network.get_weights()] +
            [np.asarray(v.numpy()) for v in self.policy.optimizer_variables()] +
            [np.float64(self.policy.exploration), features, actions, rewards,
             np.int64(len(self.buffer))])

  def set_state(self, arrays: List[np.ndarray]) -> None:
    """Restores what `state` returned.

    Args:
      arrays: the arrays of `state`.
    """
    arrays = list(arrays)
    network = self.policy.network
    count = len(network.get_weights())
    network.set_weights(arrays[:count])
    variables = self.policy.optimizer_variables()
    for variable, value in zip(variables, arrays[count:count + len(variables)], strict=True):
      variable.assign(value)
    exploration, features, actions, rewards, fill = arrays[count + len(variables):]
    self.policy.exploration = float(exploration)
    self.buffer = ReplayBuffer(self.buffer.capacity)
    for i in range(int(fill)):
      self.buffer.push((np.asarray(features[i]), np.asarray(actions[i]), float(rewards[i])))

  def round(self, state, client_data, rehearsal_data=None,
            round_num: Optional[int] = None) -> RLRound:
    """One round from `state` on the cohort's datasets (module docstring).

    Args:
      state: the process state.
      client_data: the cohort's datasets, exactly N.
      rehearsal_data: the rehearsal batches, if the process rehearses on server data.
      round_num: seeds the round's exploration and minibatch (default: rounds run so far), so a
        resumed run that restored `state()` draws what an uninterrupted one would.

    Returns:
      The round's `RLRound`.

    Raises:
      ValueError: if `client_data` does not hold exactly N datasets.
    """
    round_num = self._rounds if round_num is None else round_num
    self._rounds = round_num + 1
    rng = np.random.default_rng([self._seed, round_num])
    if len(client_data) != self.policy.num_clients:
      raise ValueError(f'DGA-RL needs exactly {self.policy.num_clients} clients a round (its '
                       f'network has fixed slots), got {len(client_data)}.')
    updates, _, weights, features, client_measurements = self._process.client_round(
        state, client_data)
    x = standardized_features(np.stack([np.asarray(f) for f in features]))
    rl_weights, action = self.policy.act(x, rng)
    softmax_weights = np.asarray(weights, np.float64) / np.sum(weights)
    # Weights <= 1 with the ratios of a (bounded-weight aggregators clip to [w_min, 1]).
    candidate_a = self._process.server_step(state, updates,
                                            list(rl_weights / rl_weights.max()))
    candidate_b = self._process.server_step(state, updates, list(weights))
    errors = tuple(float(self._validation_error(self._process.get_model_weights(c.state)))
                   for c in (candidate_a, candidate_b))
    kept_rl, r = reward(errors[0], errors[1], self._theta, self._reward_scale)
    kept = candidate_a if kept_rl else candidate_b
    self.buffer.push((x, action, r))
    self.policy.update(self.buffer.sample(rng, self._batch_size))
    new_state = kept.state
    measurements = collections.OrderedDict(client_work=client_measurements,
                                           **kept.metrics)
    if self._process.rehearse is not None:
      args = (new_state,) if self._process.central_data_type is None else (new_state,
                                                                           rehearsal_data)
      rehearsed = self._process.rehearse(*args)
      new_state = rehearsed.state
      measurements.update(rehearsed.metrics)
    return RLRound(new_state, measurements, rl_weights, softmax_weights, errors, kept_rl, r)

