# syntax=docker/dockerfile:1
# Switchboard: one image for every workload, the migrations and the topic admin.
#
#   docker build -t switchboard:dev .
#   docker run --rm switchboard:dev dispatcher      # ENTRYPOINT is `switchboard`, CMD the service
#
# Reproducible builds (docs/deploy.md "Building the image"): dependencies are pinned in
# requirements.lock (make lock); pin the base by digest and pass SOURCE_DATE_EPOCH:
#   docker buildx build --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest> \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     --output type=image,name=switchboard:dev,rewrite-timestamp=true .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder
# With SOURCE_DATE_EPOCH set, pip and Python write reproducible (hash-checked) .pyc files.
ARG SOURCE_DATE_EPOCH
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# A compiler for the wheels PyPI lacks on some platforms (faust-streaming on arm64); builder only.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The dependencies first: this layer is rebuilt only when the lock changes.
COPY requirements.lock ./
RUN pip wheel --wheel-dir /wheels -r requirements.lock
COPY pyproject.toml README.md ./
COPY switchboard ./switchboard
COPY services ./services
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/switchboard \
 && /opt/switchboard/bin/pip install --no-index --find-links /wheels -r requirements.lock /wheels/switchboard-*.whl \
 && /opt/switchboard/bin/pip uninstall -y pip setuptools

# --------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="switchboard" \
      org.opencontainers.image.description="LLM agents on business conversations: api, dispatcher, runner, notifier, brief, outbox-relay" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Proprietary"
ENV PATH=/opt/switchboard/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SWITCHBOARD_SCHEMAS_DIR=/app/schemas \
    HOME=/tmp
RUN groupadd --system --gid 10001 switchboard \
 && useradd --system --uid 10001 --gid switchboard --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin switchboard
COPY --from=builder /opt/switchboard /opt/switchboard
# The Avro contracts: switchboard.contracts reads them from SWITCHBOARD_SCHEMAS_DIR.
COPY schemas /app/schemas
WORKDIR /app
USER 10001:10001
# 8000: the API; 8081: /healthz, /readyz, /metrics of every worker.
EXPOSE 8000 8081
ENTRYPOINT ["switchboard"]
CMD ["api"]
