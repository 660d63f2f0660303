# One entry point for the project. `make help` lists the targets.
# `make serve` and `make test` create .venv and node_modules on first use: they are the whole set-up.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
DEPS := $(VENV)/.installed
NODE_DEPS := node_modules/.installed
# Reproducible builds: dates in the site (sitemap) come from the last commit, not the clock.
export SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 315532800)
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg
export NO_MKDOCS_2_WARNING := 1
# The lessons' blocks and the tests run tiny tensors, for which a second intra-op thread costs more CPU than it
# saves (it mostly spins), and `make test` runs two steps at a time on two cores: its steps, the builds and the
# writer's loop run one thread per process. `make bench` and `make train` keep their own settings.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# Every target names an action, not a file. Set-up, the site and the learner's and writer's tools:
.PHONY: help deps serve build postbuild lab-address exercises lock clean distclean
# make test, its steps (run two at a time), and the suites they run, each also usable alone:
.PHONY: test test-steps test-build test-lint test-browser test-unit test-site-check test-browser-live \
	test-browser-widgets test-unit-processes
.PHONY: lint quick unit unit-rest unit-processes site-check browser browser-pages browser-live browser-widgets
# Outside make test: the reproducibility build, the Triton kernels, the GPU, the other generators:
.PHONY: build-again test-reproducible test-triton test-gpu bench-gpu build-properdocs canary-zensical
# Measurements and training, run by hand:
.PHONY: bench bench-site bench-mha-ways bench-flash bench-mechanisms bench-patterns bench-live-model \
	bench-long-context bench-flex bench-sparse bench-split-kv bench-continuous-batching bench-speculative bench-quantized-cache parallel
.PHONY: train train-check train-text train-qk-norm train-indexer train-hybrids train-heads ablate measure-quantized-cache

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

$(DEPS): requirements.txt pyproject.toml
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	@# checkouts from before the package was named mha-computed have it installed as lessons_src
	$(BIN)/python -m pip uninstall --quiet --yes lessons_src 2>/dev/null || true
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

$(NODE_DEPS): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

deps: $(DEPS) $(NODE_DEPS)

# The writer's loop: a dirty rebuild of the saved page only, with the outputs of unchanged blocks and the lab
# notebook's run reused from .cache/dev (tools/site_build/dev_cache.py says what each is keyed on; an edit to
# the package, its data, tools/ or the pins rebuilds every page and reruns every block). The watched folders:
# docs/ and mkdocs.yml (MkDocs'), the package and the hooks. SERVE_FLAGS: more options (--dev-addr HOST:PORT).
# SOURCE_DATE_EPOCH is fixed here, not the last commit's time: it is in every block's key (the wheel's bytes,
# whose hash a page prints, depend on it), so a commit would otherwise make the next serve rerun every block.
DEV_CACHE := .cache/dev
SERVE_FLAGS ?=
serve: $(DEPS) $(NODE_DEPS) ## Serve the site with live reload at http://127.0.0.1:8000 (rebuilds only what an edit changes)
	$(ONE_THREAD) SITE_DEV_CACHE=$(DEV_CACHE) SOURCE_DATE_EPOCH=315532800 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000 --dirty \
		--watch lessons_src --watch tools/site_build $(SERVE_FLAGS)

build: $(DEPS) $(NODE_DEPS) ## Build the site strictly into site/ (every lesson's code runs)
	$(ONE_THREAD) $(BIN)/mkdocs build --strict --clean --site-dir site

# The post-build step alone (mkdocs build runs it as its last hook): math, figures, accessibility and loading
# fixes, unused assets, over any built site. SITE_DIR: the folder (site/ unless given).
SITE_DIR ?= site
postbuild: $(DEPS) $(NODE_DEPS) ## Run the generator-independent post-build step alone over SITE_DIR (default site/)
	$(BIN)/python tools/site_build/postbuild.py $(SITE_DIR)

# Other generators, each in its own environment: requirements.txt without MkDocs (and ProperDocs), installed
# with --no-deps since every version is pinned there, plus the generator's pins in tools/generators/<name>.txt.
.venv-%/.installed: requirements.txt pyproject.toml tools/generators/%.txt
	rm -rf .venv-$* && $(PYTHON) -m venv .venv-$*
	{ grep -v -E '^(mkdocs|mkdocs-get-deps|properdocs)==' requirements.txt; cat tools/generators/$*.txt; } \
		> .venv-$*/requirements.txt
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python -m pip install --quiet --no-deps -r .venv-$*/requirements.txt
	.venv-$*/bin/python -m pip install --quiet --no-deps -e .
	@touch $@

# The whole site under ProperDocs, with MkDocs not installed, compared file by file with site/ (build it first):
# the differences go to docs/_data/generators/properdocs.json, explained in tools/README.md.
PROPERDOCS_SITE := .cache/site-properdocs
build-properdocs: .venv-properdocs/.installed $(DEPS) $(NODE_DEPS) ## Build the site with ProperDocs in its own env, diffed with site/ (after make build)
	@[ -f site/index.html ] || { echo "build-properdocs compares with site/: run make build first" >&2; exit 2; }
	rm -rf $(PROPERDOCS_SITE)
	.venv-properdocs/bin/properdocs build --strict --quiet -f mkdocs.yml --site-dir $(PROPERDOCS_SITE)
	$(BIN)/python tools/generators/compare_sites.py site $(PROPERDOCS_SITE) \
		--generator "ProperDocs $$(.venv-properdocs/bin/python -c 'import importlib.metadata as m; print(m.version("properdocs"))')" \
		--out docs/_data/generators/properdocs.json

# The Zensical canary: the site built by the pinned Zensical in its own environment, and what survives (pages,
# executed blocks, figures, math, practice widgets) counted in its HTML against site/ (build it first).
canary-zensical: .venv-zensical/.installed $(DEPS) $(NODE_DEPS) ## Build the site with Zensical (pinned, own env); report what survives (after make build)
	@[ -f site/index.html ] || { echo "canary-zensical compares with site/: run make build first" >&2; exit 2; }
	$(BIN)/python tools/generators/zensical_canary.py --zensical .venv-zensical/bin/zensical \
		--out docs/_data/generators/zensical.json

# Reproducible builds: a second, independent strict build (every block run again) compared with site/ byte for
# byte by tests/site/test_reproducible.py. A second full build would double the build's share of `make test`'s
# budget, so it runs after it: `.ci/run` and the workflow run it next, then `make test-triton`. Alone (no
# SITE_AGAIN), the test builds the second site itself.
SITE_AGAIN := .cache/site-again
REPRODUCIBLE_TESTS := tests/site/test_reproducible.py
build-again: $(DEPS) $(NODE_DEPS)
	rm -rf $(SITE_AGAIN)
	$(ONE_THREAD) $(BIN)/mkdocs build --strict --quiet --site-dir $(SITE_AGAIN)
test-reproducible: build-again ## Build the site again and compare it with site/ byte for byte (after make build; CI runs it after make test)
	@[ -f site/index.html ] || { echo "test-reproducible compares with site/: run make build first" >&2; exit 2; }
	SITE_AGAIN=$(SITE_AGAIN) $(PYTEST) $(REPRODUCIBLE_TESTS) --list-checks=$(CHECKS)/reproducible.txt

lint: $(DEPS) ## ruff (with bugbear), mypy on lessons_src, zizmor on the workflows
	$(BIN)/ruff check conftest.py lessons_src tests tools
	$(BIN)/mypy
	$(BIN)/zizmor --offline --no-progress .github/workflows

# Every suite writes the id of each test it collected to $(CHECKS)/<suite>.txt (tests/conftest.py), and reports
# its slowest tests; tools/dev/compare_checks.py compares two such lists check by check.
CHECKS := .cache/checks
PYTEST := $(BIN)/python -m pytest -q --durations=15 --durations-min=1

unit: $(DEPS) ## Unit tests and the core's docstring examples (no site needed)
	$(PYTEST) --ignore=tests/site --ignore=tests/browser --list-checks=$(CHECKS)/unit.txt

quick: $(DEPS) ## The unit tests but those marked slow (wheels, fresh environments, compiles, notebook runs)
	$(PYTEST) --ignore=tests/site --ignore=tests/browser -m "not slow"

# `make test` runs the unit tests in two steps: the multi-process ones (they start 2 and 4 Python processes joined
# by gloo) last, after the site checks, the rest before them.
UNIT_PROCESSES := tests/core/test_parallel.py
unit-rest: $(DEPS)
	$(PYTEST) --ignore=tests/site --ignore=tests/browser $(addprefix --ignore=,$(UNIT_PROCESSES)) \
		--list-checks=$(CHECKS)/unit.txt
unit-processes: $(DEPS)
	$(PYTEST) $(UNIT_PROCESSES) --list-checks=$(CHECKS)/unit-processes.txt

site-check: $(DEPS) $(NODE_DEPS) ## Checks on the built site/: links, snippets, claims, pages (run after build; make test-reproducible: the second build)
	$(PYTEST) -n 2 tests/site $(addprefix --ignore=,$(REPRODUCIBLE_TESTS)) --list-checks=$(CHECKS)/site.txt

browser: $(DEPS) $(NODE_DEPS) ## Real-browser tests of site/ in Debian's Chromium: pages, axe-core, widgets (after build)
	$(PYTEST) tests/browser --list-checks=$(CHECKS)/browser.txt

# `make test` runs the browser tests in three parts: the pages' checks, then the live models' tests, in one slot;
# the widgets' tests (they open pages of their own, not the shared view) in the other.
LIVE_BROWSER_TESTS := tests/browser/test_live_model.py tests/browser/test_live_text_model.py
WIDGET_BROWSER_TESTS := tests/browser/test_widgets.py
browser-pages: $(DEPS) $(NODE_DEPS)
	$(PYTEST) tests/browser $(addprefix --ignore=,$(LIVE_BROWSER_TESTS) $(WIDGET_BROWSER_TESTS)) \
		--list-checks=$(CHECKS)/browser.txt
browser-live: $(DEPS) $(NODE_DEPS)
	$(PYTEST) $(LIVE_BROWSER_TESTS) --list-checks=$(CHECKS)/browser-live.txt
browser-widgets: $(DEPS) $(NODE_DEPS)
	$(PYTEST) $(WIDGET_BROWSER_TESTS) --list-checks=$(CHECKS)/browser-widgets.txt

# `make test` keeps both cores busy: it runs these steps two at a time (make -j2), each as soon as what it
# reads exists and a slot is free, in the order listed: the strict build beside lint and the unit tests (they need
# no site/); then the pages' browser tests (the longest step) in the build's slot, the site checks after the unit
# tests in the other; then whichever slot frees first takes the live models' browser tests, the next the widgets',
# and the multi-process unit tests go last. Each step's output is printed when it ends, with when it started
# and ended; the first failure stops `make test` (the steps already running finish). The second build that
# checks the site is reproducible is not a step: `make test-reproducible`, after `make test` in CI.
test: $(DEPS) $(NODE_DEPS) ## Lint, unit tests, strict build, site and browser checks; CI runs it first (budget: 10 min on 2 cores)
	@rm -rf $(CHECKS)
	@$(ONE_THREAD) MAKE_TEST_START=$$(date +%s) $(MAKE) --no-print-directory -j2 --output-sync=target test-steps

test-steps: test-build test-lint test-browser test-unit test-site-check test-browser-live test-browser-widgets \
	test-unit-processes
	@echo "make test: every step passed. Wall time and CPU seconds per step ($(CHECKS)/timings.txt):"
	@cat $(CHECKS)/timings.txt
TIMED = @$(BIN)/python tools/dev/timed.py $(1) $(CHECKS)/timings.txt -- $(MAKE) --no-print-directory
test-build:
	$(call TIMED,build) build
test-lint:
	$(call TIMED,lint) lint
test-browser: test-build
	$(call TIMED,browser) browser-pages
test-unit: test-lint
	$(call TIMED,unit) unit-rest
test-site-check: test-build test-unit
	$(call TIMED,site-check) site-check
test-browser-live: test-build test-unit
	$(call TIMED,browser-live) browser-live
test-browser-widgets: test-build test-unit
	$(call TIMED,browser-widgets) browser-widgets
test-unit-processes: test-unit
	$(call TIMED,unit-processes) unit-processes

# No install step: a GPU machine may have no network and a CUDA torch already installed (python3 needs torch and
# pytest). The file is named because collecting all of tests/ needs a built site/.
test-gpu: ## The core on a CUDA GPU in float32, float16 and bfloat16 against float64 and SDPA (tests marked gpu)
	@python3 -c "import torch; print('torch', torch.__version__, '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"
	PYTHONPATH=. python3 -m pytest -m gpu tests/core/test_gpu.py tests/core/test_triton_flash.py

# Triton (the [triton] extra, a large install) goes into a folder of its own, not .venv, so `make test` never
# imports it and `make serve` never waits for it. Its interpreter runs the kernels on CPU tensors, so CI needs no GPU.
TRITON_SITE := .cache/triton-site
$(TRITON_SITE)/.installed: requirements-triton.txt | $(DEPS)
	rm -rf $(TRITON_SITE)
	$(BIN)/python -m pip install --quiet --no-deps --target $(TRITON_SITE) -r requirements-triton.txt
	touch $@
test-triton: $(DEPS) $(TRITON_SITE)/.installed ## FlashAttention in Triton, through Triton's interpreter on the CPU (CI runs it after make test)
	TRITON_INTERPRET=1 PYTHONPATH=$(TRITON_SITE) $(PYTEST) tests/core/test_triton_flash.py \
		lessons_src/triton_flash.py \
		tests/core/test_bad_arguments.py::test_each_triton_argument_refuses_each_kind_of_wrong_value \
		--list-checks=$(CHECKS)/triton.txt

# Like test-gpu: the GPU machine's own python3, with its CUDA torch and Triton.
bench-gpu: ## On a CUDA GPU: the Triton kernel vs SDPA's FlashAttention and the tiled loop, T = 1K-16K (writes docs/_data/bench/gpu.json)
	PYTHONPATH=. python3 tools/bench/bench_gpu.py

bench: $(DEPS) $(NODE_DEPS) ## Measure speed and memory; writes docs/_data/bench/*.json and prints the report
	$(BIN)/python tools/bench/bench_mha.py
	$(BIN)/python tools/bench/bench_mha_ways.py
	$(BIN)/python tools/bench/bench_flash.py
	$(BIN)/python tools/bench/bench_mechanisms.py
	$(BIN)/python tools/bench/bench_patterns.py
	$(BIN)/python tools/bench/bench_linear.py
	$(BIN)/python tools/bench/bench_decode.py && $(BIN)/python tools/bench/gqa_convert_quality.py
	$(BIN)/python tools/bench/bench_long_context.py
	$(BIN)/python tools/bench/bench_flex.py
	$(BIN)/python tools/bench/bench_sparse.py
	$(BIN)/python tools/bench/bench_roofline.py
	$(BIN)/python tools/bench/bench_split_kv.py
	$(BIN)/python tools/bench/bench_continuous_batching.py
	$(BIN)/python tools/bench/bench_speculative.py
	$(BIN)/python tools/bench/bench_quantized_cache.py
	$(MAKE) bench-site
	$(BIN)/python tools/bench/bench_live_model.py

# PAGES: sitemap paths to measure (e.g. PAGES="lessons/pitfalls/ summary/"; empty = every page; the home page
# is measured by any run that names no page). REPEATS: Lighthouse runs per page, the median reported.
PAGES ?=
REPEATS ?= 3
bench-site: $(DEPS) $(NODE_DEPS) ## Build time and Lighthouse (mobile, median of REPEATS) of PAGES beside a stock page
	$(BIN)/python tools/bench/bench_site.py --repeats $(REPEATS) $(if $(strip $(PAGES)),--pages $(PAGES))

bench-live-model: $(DEPS) $(NODE_DEPS) ## Time the live model page in Chromium (forward pass, head toggle; after build)
	$(BIN)/python tools/bench/bench_live_model.py

bench-mha-ways: $(DEPS) ## Only the common ways of writing MHA (Raschka's setup), eager and compiled (the longest bench)
	$(BIN)/python tools/bench/bench_mha_ways.py

bench-flash: $(DEPS) ## Only tiled attention vs eager and SDPA at T=8192 (eager keeps the T x T weights for backward: much memory)
	$(BIN)/python tools/bench/bench_flash.py

bench-mechanisms: $(DEPS) ## Only today's mechanisms (QK-norm, gates, sinks, cap) against plain MHA
	$(BIN)/python tools/bench/bench_mechanisms.py

bench-patterns: $(DEPS) ## Only layer patterns (window, chunk, shared KV) against all-global decoding, 1K-32K cached
	$(BIN)/python tools/bench/bench_patterns.py

bench-flex: $(DEPS) ## Only compiled FlexAttention vs SDPA with the dense mask, four masks, T = 1K-8K (compiles each)
	$(BIN)/python tools/bench/bench_flex.py

bench-sparse: $(DEPS) ## Only attention over k = 512 chosen keys vs dense at S = 8192: a decoding step, a prefill
	$(BIN)/python tools/bench/bench_sparse.py

bench-split-kv: $(DEPS) ## Only split-KV decoding vs one pass (8K-128K cached) and a shared 4K prefix vs own copies
	$(BIN)/python tools/bench/bench_split_kv.py

bench-continuous-batching: $(DEPS) ## Only 16 requests one at a time, in a padded batch, and by continuous batching
	$(BIN)/python tools/bench/bench_continuous_batching.py
bench-speculative: $(DEPS) ## Only the text model's greedy decoding vs prompt-lookup speculation (chains, trees), two sets
	$(BIN)/python tools/bench/bench_speculative.py
bench-quantized-cache: $(DEPS) ## Only a decoding step over quantized KV caches (dequantized on the fly) vs the float cache, 8K and 32K cached
	$(BIN)/python tools/bench/bench_quantized_cache.py

bench-long-context: $(DEPS) ## Only paged vs contiguous and rolling caches, cached vs recomputed decoding
	$(BIN)/python tools/bench/bench_long_context.py

train: $(DEPS) ## Retrain the 2-layer induction model into lessons_src/lab/artifacts/ (seeded, CPU)
	$(BIN)/python tools/train/train_induction.py

train-check: $(DEPS) ## Retrain the induction model from its seed in a temporary folder: the same heads as committed?
	FULL_RETRAIN=1 $(PYTEST) tests/lab/test_toy_models.py -k retraining

train-text: $(DEPS) ## Retrain the byte-level GPT on the course's prose, with head snapshots, into lessons_src/lab/artifacts/ (seeded, 1 thread)
	$(BIN)/python tools/train/train_text.py

train-qk-norm: $(DEPS) ## Retrain the text model with and without QK-norm, 3 learning rates x 2 seeds (600 steps each, 2 at a time)
	$(BIN)/python tools/train/train_qk_norm.py

train-indexer: $(DEPS) ## Fit a lightning indexer to each layer of the frozen text model; loss and weight kept against k (seeded)
	$(BIN)/python tools/train/train_indexer.py

train-hybrids: $(DEPS) ## Train all-linear, 3:1 hybrid and all-attention models on the copy task; accuracy against distance (seeded, 1 thread)
	$(BIN)/python tools/train/train_hybrids.py

train-heads: $(DEPS) ## Retrain the one-head-vs-many sweep (h = 1, 2, 4, 8) into lessons_src/lab/artifacts/ (seeded)
	$(BIN)/python tools/train/train_one_vs_many.py

measure-quantized-cache: $(DEPS) ## Decode the text model's validation windows with each quantized KV cache: error, loss, greedy agreement (1 thread)
	$(BIN)/python tools/train/measure_quantized_cache.py

ablate: $(DEPS) ## Ablate and prune all-MiniLM-L6-v2's heads into lessons_src/lab/artifacts/
	$(BIN)/python tools/train/ablate_minilm.py

parallel: $(DEPS) ## Tensor-parallel, Ulysses and ring attention in 2 and 4 local processes (gloo), checked and counted
	$(BIN)/python tools/parallel/check_parallel.py

# FILE: your answers (.py or .ipynb); EXERCISE: one exercise's name, or all (python -m lessons_src.lab.exercises list)
EXERCISE ?= all
exercises: $(DEPS) ## Check your answers to the coding exercises: make exercises FILE=my_attention.py [EXERCISE=split_heads]
	@[ -n "$(FILE)" ] || { echo "usage: make exercises FILE=path/to/your_answers.py [EXERCISE=name]" >&2; exit 2; }
	$(BIN)/python -m lessons_src.lab.exercises check $(EXERCISE) "$(FILE)"

lab-address: $(DEPS) ## Write the site's wheel address (from SITE_URL or the GitHub remote) into the lab notebook Colab opens
	$(BIN)/python tools/site_build/mkdocs_code_hooks.py

lock: ## Re-resolve requirements.in into the pinned requirements.txt
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements.in
	@# --all keeps setuptools (torch asks for it unpinned, and it builds the site's wheel); pip is upgraded by deps
	.lock-venv/bin/pip freeze --all | grep -v '^pip==' | sed -e 's/^torch==\(.*\)+cpu/torch==\1/' > requirements.txt
	rm -rf .lock-venv

clean: ## Remove build outputs (site/, caches)
	rm -rf site .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

distclean: clean ## Also remove .venv, the other generators' environments and node_modules
	rm -rf $(VENV) .venv-properdocs .venv-zensical node_modules
