"""The speech wing: end-to-end speech recognition trained with DP federated learning.

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098. Its data
(`data`: corpus readers, audio, transcripts, features, client data), its model (`models`: the
CTC transformer and its TFF model), scoring (`metrics`) and decoding (`decoding`), and the speech
task on the run layer: configuration, federated and central training, evaluation, transcription.
Importing this package imports none of its modules.
"""
