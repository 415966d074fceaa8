# agentrun-operator: every command installs what it needs on a fresh machine.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CLUSTER_DIR := .cluster
KUBECONFIG_LOCAL := $(CLUSTER_DIR)/kubeconfig
# NODE=0: `make cluster` starts the control plane without its node (no kubelet).
NODE ?= 1
WITH_NODE := $(filter 1,$(NODE))

.PHONY: help venv godeps controlplane cluster test lint crds manifests install operator mutate \
	imagetools image nodedeps helm otelcol

help:
	@echo "make cluster   start a local Kubernetes control plane and its node (foreground; Ctrl-C stops it; NODE=0: no node)"
	@echo "make operator  run the operator in the foreground against \$$KUBECONFIG (default .cluster/kubeconfig)"
	@echo "make install   apply CRDs, operator RBAC and admission policies to that cluster"
	@echo "make test      install everything and run the whole suite (what CI runs)"
	@echo "make crds      regenerate crds/ (the CRDs and their kustomization.yaml) and docs/reference/api.md from the models"
	@echo "make image    build the pause and project images into ~/.cache/agentrun/images (no registry)"
	@echo "make release   the wheel, sdist, chart package, image archives and SHA256SUMS into dist/ (no cluster)"
	@echo "make mutate    mutation testing of the reassignment guard and ended-attempt predicate"
	@echo "make demo      the recovery trace with real worker pods on a local cluster it starts and removes"
	@echo "make bench     every benchmark (figures into docs/benchmarks.md, each command its own section)"
	@echo "make bench-traces  what tracing costs a step and a write, off and on (docs/benchmarks.md)"
	@echo "make bench-sdk  the worker SDK's install size and import time, beside the operator's (docs/benchmarks.md)"
	@echo "make bench-journal  the journal, and its LangGraph checkpointer, beside LangGraph's PostgresSaver (docs/benchmarks.md)"
	@echo "make faults    fault scenarios on a cluster (and node) of their own: scenario x count x violations"
	@echo "make journal-scale  20,000 steps and a 2 GiB artifact on real pods, killed at seeded points"
	@echo "make langgraph-kills  the example LangGraph agent on real pods, killed at ten seeded supersteps"
	@echo "make failover  two elected replicas, the leader killed 20 times mid-burst of claims: takeover p50/p99 (docs/benchmarks.md)"

# Python packages, reinstalled when either distribution's pyproject.toml changes: the
# worker SDK's (sdk/) and the operator's (the root's, which depends on the SDK's).
$(VENV)/.installed: pyproject.toml sdk/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ./sdk -e '.[test,mutate,langgraph]'
	touch $@

venv: $(VENV)/.installed

# Go modules for the control plane, then the build itself (cached outside the clone).
godeps:
	cd tests/controlplane && go mod download
	cd tests/otelcol && go mod download

controlplane: venv godeps
	$(PY) -m tests.support.cluster.localcluster build

# Image builders from Debian, installed only when missing (buildah: images without a
# daemon or registry; mmdebstrap: the Debian base standing in for python:3.11-slim).
imagetools:
	command -v buildah >/dev/null && command -v mmdebstrap >/dev/null || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y buildah mmdebstrap; }

image: venv godeps imagetools
	$(PY) -m tests.support.cluster.images build all

# The release's files in dist/, without a cluster (tests/support/release.py): the wheel and
# the sdist (python -m build, the release extra), the chart's package (helm package), the
# images of `make image` as OCI archives (dist/agentrun-operator-<version>.oci.tar, named
# agentrun-operator:<version>, and the bundled store's, seaweedfs-<its version>.oci.tar)
# and SHA256SUMS. The version is pyproject.toml's: Chart.yaml and the manifests' image tag
# must say the same.
$(VENV)/.installed-release: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet -e ./sdk -e '.[release]'
	touch $@

.PHONY: release
release: $(VENV)/.installed-release imagetools
	$(PY) -m tests.support.release --out dist

# The node's runtime: runc, the CNI plugins and iptables (and libfaketime, for the
# clock-skew scenario's operator) from Debian, installed only
# when missing; containerd from its Go module, built once into ~/.cache/agentrun/containerd.
nodedeps: venv imagetools
	test -x /usr/sbin/runc && test -x /usr/lib/cni/bridge && command -v iptables >/dev/null && \
		test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
			runc containernetworking-plugins iptables libfaketime; }
	$(PY) -m tests.support.cluster.localnode build

cluster: controlplane $(if $(WITH_NODE),nodedeps,)
	$(PY) -m tests.support.cluster.localnode up --dir $(CLUSTER_DIR) $(if $(WITH_NODE),,--no-node)

lint: venv
	$(VENV)/bin/ruff check operator sdk tests demo bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m agentrun.api.crds --out crds --check
	$(PY) -m agentrun.api.reference --out docs/reference/api.md --check
	$(PY) -m agentrun.manifests --out manifests --check
	$(PY) -m agentrun.chart --out charts/agentrun-operator --crds crds --check
	$(PY) -m agentrun.plugin.ui.assets --check

# One cluster for the suite: its independent integration tests in concurrent workers
# (AGENTRUN_TEST_WORKERS, default 4), then the serial ones one at a time beside the unit
# tests, then the teardown test on a cluster of its own (tests/support/cluster/session.py).
test: controlplane imagetools nodedeps helm otelcol promdeps uideps lint
	$(PY) -m tests.support.cluster.session -q -ra --durations=25

# crds/ is the CRDs' one copy: manifests/ names it as a kustomization (../crds), and the
# chart's crds/ is copied from it, so `make manifests` regenerates it first. The API
# reference is generated from the same schemas, with them.
crds: venv
	$(PY) -m agentrun.api.crds --out crds
	$(PY) -m agentrun.api.reference --out docs/reference/api.md

manifests: venv crds
	$(PY) -m agentrun.manifests --out manifests
	$(PY) -m agentrun.chart --out charts/agentrun-operator --crds crds

# Helm from its Go module, built once into ~/.cache/agentrun/helm (tests/support/cluster/helm.py);
# prints the binary's path.
helm: venv
	@$(PY) -m tests.support.cluster.helm build

# Prometheus and promtool from Debian, for the tests of the alert rules and the dashboard
# (tests/support/prometheus.py), installed only when missing.
.PHONY: promdeps
promdeps:
	test -x /usr/bin/prometheus && test -x /usr/bin/promtool || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
			--no-install-recommends prometheus; }

# Chromium from Debian, for the web UI's browser tests (tests/support/browser.py, driven by
# Playwright's Python package from the test extra: never its own browser download), and
# strace, which records every connection the UI's process makes, and ss (iproute2), which
# cuts a page's stream; installed when missing.
.PHONY: uideps
uideps:
	test -x /usr/bin/chromium && test -x /usr/bin/strace && test -x /usr/bin/ss || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
			--no-install-recommends chromium strace iproute2; }

# The web UI's vendored htmx files, fetched again from npm at the versions and digests
# agentrun/plugin/ui/assets.py records (make lint checks the files against them).
.PHONY: ui-assets
ui-assets: venv
	$(PY) -m agentrun.plugin.ui.assets --fetch

# The OpenTelemetry Collector (an OTLP receiver for the tracing tests) from its Go modules
# (tests/otelcol), built once into ~/.cache/agentrun/otelcol (tests/support/otelcol.py).
otelcol: venv godeps
	@$(PY) -m tests.support.otelcol build

# Against $$KUBECONFIG (default: the local control plane's); the local cluster's
# operator runs as its own `operator` user, so it has only the rights RBAC gives it.
# That user is bound (manifests/local/) only on the local control plane: on a real
# cluster the role is bound to the operator's ServiceAccount alone.
KUBECONFIG ?= $(abspath $(KUBECONFIG_LOCAL))
export KUBECONFIG
KUBECTL ?= $(if $(wildcard $(CLUSTER_DIR)/bin/kubectl),$(CLUSTER_DIR)/bin/kubectl,kubectl)
LOCAL_CLUSTER := $(filter $(abspath $(KUBECONFIG_LOCAL)),$(KUBECONFIG))
OPERATOR_CONTEXT ?= $(if $(LOCAL_CLUSTER),operator,)

# crds/ holds its kustomization.yaml, which `-f crds/` would send as an object: the CRDs
# are applied as the kustomization, and waited for by their files (wait has no -k).
CRD_FILES = $(wildcard crds/agentrun.dev_*.yaml)

install: venv
	$(KUBECTL) apply --server-side -k crds
	$(KUBECTL) wait --for=condition=Established --timeout=60s $(addprefix -f ,$(CRD_FILES))
	$(KUBECTL) apply --server-side -f manifests/rbac/ -f manifests/admission/ \
		$(if $(LOCAL_CLUSTER),-f manifests/local/,)

operator: install
	$(VENV)/bin/agentrun-operator run $(if $(OPERATOR_CONTEXT),--context $(OPERATOR_CONTEXT),)

# mutmut strips only a "src." prefix from module names: src is a symlink to sdk/ (the core
# it mutates is the worker SDK's distribution's).
mutate: venv
	ln -sfn sdk src
	rm -rf mutants
	$(VENV)/bin/mutmut run
	$(VENV)/bin/mutmut results

# The control-loop benchmark (bench/loop, bench/README.md): its own control plane without a
# node, the operator vs an Indexed Job; prints figures and writes docs/benchmarks.md.
# UNITS=40,100 for a quick look.
UNITS ?= 200,1000
.PHONY: bench-loop
bench-loop: controlplane
	$(PY) -m bench.loop --units $(UNITS)

# The scale benchmark (bench/scale): its own control plane without a node, the operator's
# RSS/CPU idle and at each size of live Active slots (leases renewed by a load generator),
# steady reads, the resync of the largest size after a restart. SCALE=200,1000 for a look.
SCALE ?= 1000,10000
.PHONY: bench-scale
bench-scale: controlplane
	$(PY) -m bench.scale --slots $(SCALE)

# The latency benchmark (bench/latency): failure detection, replacement, reassignment
# and recovery, the operator beside an Indexed Job and a bare client's floor.
LATENCY_COUNT ?= 200
.PHONY: bench-latency
bench-latency: controlplane
	$(PY) -m bench.latency --count $(LATENCY_COUNT)

# The bench extra (bench/client, bench/journal) over the venv's own install; reinstalled
# when pyproject.toml changes or the venv is reinstalled.
$(VENV)/.installed-bench: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet -e ./sdk -e '.[bench]'
	touch $@

# The journal benchmark (bench/journal): the journal (a control plane of its own without a
# node, a loopback SeaweedFS) beside LangGraph's PostgresSaver on a throwaway durable
# PostgreSQL 15 (Debian's; installed when missing); writes its section of docs/benchmarks.md.
# JOURNAL_ARGS="--side postgres": one side.
JOURNAL_ARGS ?=
.PHONY: bench-journal
bench-journal: controlplane $(VENV)/.installed-bench
	$(PY) -m bench.journal $(JOURNAL_ARGS)
	$(PY) -m bench.journal.graphs

# Every benchmark, one after the other, each writing its own section of docs/benchmarks.md
# (bench/common/report.py): figures with the machine, the commit and the date; never a test.
.PHONY: bench
bench: bench-loop
bench: bench-scale
bench: bench-latency
bench: bench-renewals
bench: bench-journal
bench: bench-traces
bench: bench-sdk
bench: bench-ui

# What tracing costs (bench/traces): a worker's step span and an operator's report, off and
# on, sent to a real OpenTelemetry Collector on loopback; seconds.
.PHONY: bench-traces
bench-traces: otelcol
	$(PY) -m bench.traces

# What a worker image installs and imports for the SDK (bench/sdk): fresh virtualenvs
# installed offline, the SDK alone beside the operator's distribution; MiB and ms.
bench-sdk: venv
	$(PY) -m bench.sdk

# The web UI's benchmark (bench/ui): 1,000 runs and 10,000 slots on a local control plane,
# the runs page and a run's page timed in Debian's Chromium; writes its section of
# docs/benchmarks.md.
.PHONY: bench-ui
bench-ui: controlplane uideps
	$(PY) -m bench.ui

# The renewals benchmark (bench/renewals): its own control plane WITH its node, WORKERS
# real workers renewing their leases, the renewals per second and their API and operator
# cost over a window; writes its section of docs/benchmarks.md.
WORKERS ?= 40
.PHONY: bench-renewals
bench-renewals: controlplane nodedeps image
	$(PY) -m bench.renewals --workers $(WORKERS)

# The recovery trace with real workers (python -m demo.recovery --up): starts the control
# plane and its node, installs the operator as a pod, plays, tears everything down (Ctrl-C too).
.PHONY: demo
demo: controlplane nodedeps image helm
	$(PY) -m demo.recovery --up

# Fault scenarios (bench/faults): their own control plane WITH its node, each scenario
# played COUNT times, a table scenario × count × violations; nothing written unless
# FAULTS_ARGS has --write. Stops by itself; exit 1 on any violation. Every scenario once
# takes about 34 min on 2 cores (kill-points, 200 worker pods killed, most of it;
# journal-matrix about 4 min, with the bundled object store; failover about 4 min);
# FAULTS_ARGS="--scenarios paused-apiserver,watch-cut" for some.
COUNT ?= 1
FAULTS_ARGS ?=
FAILOVER_ARGS ?=
.PHONY: faults
faults: controlplane nodedeps image
	$(PY) -m bench.faults --count $(COUNT) $(FAULTS_ARGS)

# The journal at an agent's scale on real pods (bench/faults/journal_scale.py): 20,000
# group-committed steps and a 2 GiB artifact, the worker SIGKILLed in a commit window and
# mid multipart upload at seeded points (JOURNAL_SCALE_ARGS="--journal-scale-seed N"),
# every committed result checked; about 4 min on 2 cores. Not in `make faults`' default set.
JOURNAL_SCALE_ARGS ?=
.PHONY: journal-scale
journal-scale: controlplane nodedeps image
	$(PY) -m bench.faults --scenarios journal-scale $(JOURNAL_SCALE_ARGS)

# Two elected replicas, the fence in force, the leader lost mid-burst of 200 claims
# (bench/faults/failover.py): 20 SIGKILLs, a SIGSTOP past its lease, a half-open
# connection; no write of a former leader admitted after its successor's first, no slot
# claimed twice, maxActive never exceeded; the takeover's p50/p99 into docs/benchmarks.md
# (## Failover). About 4 min on 2 cores; also in `make faults`' default set.
.PHONY: failover
failover: controlplane
	$(PY) -m bench.faults --scenarios failover --write docs/benchmarks.md $(FAILOVER_ARGS)

# The example LangGraph agent on real pods (bench/faults/langgraph_kills.py): SIGKILLed at
# ten seeded supersteps (LANGGRAPH_KILLS_ARGS="--langgraph-kills-seed N") and once after
# its owner applied the publish; each successor resumes at the superstep its predecessor
# died in, committed checkpoints unchanged, published once; then, where approval is
# required, the successor's other words asked again. About 3 min on 2 cores.
LANGGRAPH_KILLS_ARGS ?=
.PHONY: langgraph-kills
langgraph-kills: controlplane nodedeps image
	$(PY) -m bench.faults --scenarios langgraph-kills $(LANGGRAPH_KILLS_ARGS)
