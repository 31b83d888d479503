"""fedasr-tff: differentially private federated learning for speech recognition on TFF."""
