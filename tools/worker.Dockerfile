# One TFF worker of a distributed fedasr-tff run (docs/distributed.md).
#
#   docker build -f tools/worker.Dockerfile -t fedasr-tff-worker .
#   docker run --rm -p 10.0.0.5:8000:8000 fedasr-tff-worker    # port 8000 of one private address
#   docker run --rm -p 10.0.0.5:9000:9000 fedasr-tff-worker --port=9000 \
#     --max_concurrent_computation_calls=4
#
# The worker needs the project's Python stack at the driver's exact versions (the lock and TFF
# 0.87.0, installed as tools/setup.sh does), nothing else: no data, no audio tools, no Bazel. It
# serves plaintext, unauthenticated gRPC and runs any TensorFlow graph it is sent: publish its
# port on one address of a private network that only the driver reaches (never `-p 8000:8000`,
# every interface of the host), or behind a proxy that requires mutual TLS
# (docs/distributed.md). A worker must never be reachable without one or the other.
#
# BASE_IMAGE: any image with Python 3.11 and its venv module (default the official one; e.g. a
# Debian bookworm image with python3-venv where Docker Hub is not reachable).
ARG BASE_IMAGE=python:3.11.7-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 TF_CPP_MIN_LOG_LEVEL=2
WORKDIR /opt/fedasr-tff
COPY requirements.lock .
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q "pip==23.2.1" \
 && /opt/venv/bin/pip install -q --no-deps -r requirements.lock \
 && /opt/venv/bin/pip install -q --no-deps "tensorflow-federated==0.87.0"
COPY fedasr_tff/ fedasr_tff/
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/opt/fedasr-tff
# Not root: the worker needs no privilege.
RUN useradd --system --no-create-home worker
USER worker
EXPOSE 8000
ENTRYPOINT ["python", "-m", "fedasr_tff.runtime.worker"]
CMD ["--port=8000"]
