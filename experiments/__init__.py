"""The absl experiment binaries (run as `python -m experiments.<name>` or `bazel run`)."""

import os

# Quiet TensorFlow's C++ INFO logging unless the user chose a level. Set here, in the package
# that every binary's module is imported through, because TF reads it when first imported, and
# every binary imports TF before anything else of ours.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
