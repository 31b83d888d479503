"""The trainable parts of the soft-embedding adapter and classifier-as-retriever, and retrieval.

Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions:
The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025: a d x d adapter on
the token embeddings of a frozen backbone (`text_models`; Sec. 3.1), a classifier head on the
pooled states, and retrieval as the top-K classes of its logits (Sec. 3.2; or, as a baseline, by
inner product with class prototypes). Federated training (`process`, Sec. 3.3) with local
(client-side) DP and a per-client adaptive clip (`local_dp`, Sec. 3.4 and App. C). Labelled text
corpora: `text_corpora`; their client splits: `partitions`. Usage and evidence: `docs/retrieval.md`.
"""

from fedasr_tff.retrieval.adapter import EmbeddingAdapter
from fedasr_tff.retrieval.heads import HEADS
from fedasr_tff.retrieval.heads import build_head
from fedasr_tff.retrieval.local_dp import NOISE_MODES
from fedasr_tff.retrieval.local_dp import LocalDPConfig
from fedasr_tff.retrieval.local_dp import LocalDPState
from fedasr_tff.retrieval.local_dp import initial_state
from fedasr_tff.retrieval.local_dp import local_epsilon
from fedasr_tff.retrieval.local_dp import noise_multiplier_delta
from fedasr_tff.retrieval.local_dp import privatize
from fedasr_tff.retrieval.local_dp import sigma_b
from fedasr_tff.retrieval.model import AdapterClassifier
from fedasr_tff.retrieval.model import FeatureClassifier
from fedasr_tff.retrieval.partitions import split_by_client
from fedasr_tff.retrieval.partitions import split_dirichlet
from fedasr_tff.retrieval.partitions import split_evenly
from fedasr_tff.retrieval.partitions import train_test_split
from fedasr_tff.retrieval.process import DP_GRANULARITIES
from fedasr_tff.retrieval.process import WEIGHTINGS
from fedasr_tff.retrieval.process import build_retrieval_process
from fedasr_tff.retrieval.process import initial_client_dp_state
from fedasr_tff.retrieval.process import run_round
from fedasr_tff.retrieval.retrieve import class_prototypes
from fedasr_tff.retrieval.retrieve import mips_scores
from fedasr_tff.retrieval.retrieve import top_k
from fedasr_tff.retrieval.retrieve import top_k_accuracy
from fedasr_tff.retrieval.retriever import Retriever
from fedasr_tff.retrieval.retriever import load_retriever
from fedasr_tff.retrieval.text_corpora import AG_NEWS_CLASSES
from fedasr_tff.retrieval.text_corpora import FORTUNES_DIR
from fedasr_tff.retrieval.text_corpora import LabelledTexts
from fedasr_tff.retrieval.text_corpora import read_ag_news
from fedasr_tff.retrieval.text_corpora import read_debian_packages
from fedasr_tff.retrieval.text_corpora import read_fortunes
from fedasr_tff.retrieval.text_corpora import read_labelled_table
from fedasr_tff.retrieval.text_corpora import read_sms_spam
from fedasr_tff.retrieval.tff_model import ADAPTER_CLASSIFIER
from fedasr_tff.retrieval.tff_model import CLASSIFIER_ONLY
from fedasr_tff.retrieval.tff_model import MODES
from fedasr_tff.retrieval.tff_model import RetrieverModel
from fedasr_tff.retrieval.tff_model import build_model_fn
