"""The absl experiment binaries (run as `python -m experiments.<name>` or `bazel run`)."""

from experiments import tensorflow_start_up

# Here, in the package every binary's module is imported through, because the noise comes with
# the first `import tensorflow`, which most binaries make before anything of ours.
tensorflow_start_up.install()
