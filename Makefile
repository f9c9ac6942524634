# Switchboard — every target creates and uses the virtual environment in .venv.
# `make help` lists the targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
STACK := scripts/stack/stack.sh
PYTEST_ARGS ?=

.PHONY: help venv up down status clean demo services test test-unit lint check-imports typecheck

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP) ## create .venv and install the project with its dev dependencies

up: venv ## start Kafka + PostgreSQL, create topics, migrate, write var/stack.env (idempotent)
	@bash $(STACK) up

down: ## stop the services (make demo / make services), Kafka and PostgreSQL (nothing is left listening)
	@bash $(STACK) down

status: ## show what runs
	@bash $(STACK) status

clean: ## stop everything and delete local data (var/)
	@bash $(STACK) clean

demo: up ## the five services and scripted customer conversations; runs until `make down`
	@$(PY) -m scripts.demo

services: up ## the five services (and the local channel server) with nothing played; runs until `make down`
	@$(PY) -m scripts.demo services

test: venv ## run the whole test suite against a real broker and database (stops a running demo first)
	@# A running demo shares the stack's database: its relay and workers would act on the tests' rows.
	@bash $(STACK) stop-demo
	@bash $(STACK) up
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: venv ## run only the tests that need no broker or database
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: venv ## ruff, import boundaries, types
	$(VENV)/bin/ruff check switchboard services tests scripts examples bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# --------------------------------------------------------------------------- deployment (docs/deploy.md)
COMPOSE := docker compose -f deploy/compose/compose.yaml

.PHONY: manifests lock deploy-check compose-up compose-down

manifests: venv ## regenerate the deploy files derived from the code (k8s base, dev KafkaTopics, compose)
	$(PY) -m scripts.deploy.generate

lock: venv ## pin the image's runtime dependencies (requirements.lock) to the versions in .venv
	$(PY) -m scripts.deploy.lock

deploy-check: venv ## validate k8s overlays, compose file and Dockerfile offline (schemas + rules)
	@bash scripts/deploy/install-kustomize.sh
	$(PY) -m scripts.deploy.generate --check
	$(PY) -m scripts.deploy.validate

compose-up: ## build the image and start the whole stack with Docker Compose (needs a Docker engine)
	@docker compose version >/dev/null 2>&1 && docker info >/dev/null 2>&1 || \
	  { echo "compose-up needs a running Docker engine and the compose plugin (docs/deploy.md)"; exit 1; }
	$(COMPOSE) up --build --detach
	$(COMPOSE) ps

compose-down: ## stop the Docker Compose stack and delete its data
	@docker compose version >/dev/null 2>&1 || { echo "compose-down needs the Docker compose plugin"; exit 1; }
	$(COMPOSE) down --volumes --remove-orphans

# --------------------------------------------------------------------------- benchmarks (docs/benchmarks.md)
BENCH_ARGS ?=

.PHONY: bench bench-api bench-dispatch bench-runner bench-e2e

bench-api: venv ## benchmark webhook ingest vs a bare FastAPI endpoint with wrk (~45 s; installs wrk when missing)
	@bash scripts/bench/install-wrk.sh
	@bash $(STACK) up
	$(PY) -m bench.api_ingest $(BENCH_ARGS)

bench-dispatch: venv ## benchmark the dispatcher vs a plain aiokafka pipe and a PostgreSQL poller (~4 min)
	@bash $(STACK) up
	$(PY) -m bench.dispatch $(BENCH_ARGS)

bench-runner: venv ## runner overhead per step vs LangGraph and OpenAI Agents SDK; 1,000 concurrent runs (~2 min)
	$(PY) -m pip install -q -e '.[bench]'
	@bash $(STACK) up
	$(PY) -m bench.runner $(BENCH_ARGS)

bench-e2e: venv ## ingest -> reply at the channel server at 200 msg/s vs a 100 ms polling pipeline (~3 min)
	@bash $(STACK) up
	$(PY) -m bench.end_to_end $(BENCH_ARGS)

BENCH_PROFILE ?=

bench: venv ## every benchmark in one run, each with its baseline: var/bench/latest.json + table (BENCH_PROFILE=smoke: quick wiring check)
	$(PY) -m pip install -q -e '.[bench]'
	@bash scripts/bench/install-wrk.sh
	@bash $(STACK) up
	BENCH_PROFILE=$(BENCH_PROFILE) $(PY) -m bench $(BENCH_ARGS)

# --------------------------------------------------------------------------- chaos (docs/chaos.md)
.PHONY: chaos

chaos: venv ## the long chaos profile: 2,000 messages over 200 conversations while every worker and the broker fail (~9 min)
	@bash $(STACK) up
	@CHAOS_PROFILE=full $(PY) -m pytest tests/chaos -p no:cacheprovider -rxX $(PYTEST_ARGS); status=$$?; \
	  cat var/chaos/full.json 2>/dev/null; exit $$status
