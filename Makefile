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

.PHONY: help venv up down status clean demo test test-unit lint check-imports typecheck

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

down: ## stop Kafka and PostgreSQL (nothing is left listening)
	@bash $(STACK) down

status: ## show what runs
	@bash $(STACK) status

clean: ## stop everything and delete local data (var/)
	@bash $(STACK) clean

demo: up ## the product's main job: the local stack and a demo conversation
	@$(PY) -m scripts.demo

test: venv ## run the whole test suite against a real broker and database
	@bash $(STACK) up
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: venv ## run only the tests that need no broker or database
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: venv ## ruff, import boundaries, types
	$(VENV)/bin/ruff check switchboard services tests scripts
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy switchboard services
