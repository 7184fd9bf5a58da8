# gpulab — a GPU-cluster lab harness. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO            ?= go
BIN           ?= $(CURDIR)/bin
# Third-party binaries, sources and testbed state live here: a per-user cache
# outside the checkout, shared by every clone (keyed by version, built under a
# file lock).
GPULAB_CACHE  ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpulab
export GPULAB_CACHE
# go-nvml (cgo) declares many deprecated NVML symbols; keep builds quiet.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# Local testbed shape: fake GPU nodes as profile=count,...
# Profiles: dgx-a100, dgx-h100, dgx-h200, dgx-b200.
TESTBED_NAME  ?= gpulab
TESTBED_NODES ?= dgx-h100=4
export TESTBED_NAME TESTBED_NODES
# The node autoscaler `make testbed-up` runs: none, or karpenter (Karpenter's
# kwok provider adding GPU nodes of the fleet's profiles, at most
# TESTBED_AUTOSCALER_MAX_GPUS nvidia.com/gpu in all).
TESTBED_AUTOSCALER          ?= none
TESTBED_AUTOSCALER_MAX_GPUS ?= 16
# Volcano and KubeRay releases the testbeds build and run; empty means the
# defaults in testbeds/binaries (Volcano v1.14.1, KubeRay v1.6.2).
# VOLCANO_VERSION=v1.10.0 and KUBERAY_VERSION=v1.5.0 are the other choices.
# Exported as GPULAB_VOLCANO_VERSION and GPULAB_KUBERAY_VERSION, which every
# testbed (the suite's own included) reads when not told a version.
VOLCANO_VERSION ?=
KUBERAY_VERSION ?=
ifneq ($(VOLCANO_VERSION),)
export GPULAB_VOLCANO_VERSION := $(VOLCANO_VERSION)
endif
ifneq ($(KUBERAY_VERSION),)
export GPULAB_KUBERAY_VERSION := $(KUBERAY_VERSION)
endif
# With GPU_ALLOCATION=dra and no VOLCANO_VERSION, the local profile runs
# Volcano v1.14.1 rebuilt on Kubernetes v1.34.4's libraries
# (binaries.DefaultDRAVolcanoVersion): as released, its DRA allocator can
# give one device to two claims. VOLCANO_VERSION=v1.14.1 runs it as released.
VOLCANO_DRA_VERSION := v1.14.1+k8s.1.34.4
# The name becomes folders that `make testbed-down` removes: a DNS-1123 label
# only (gpulab-testbed checks it too).
ifneq ($(shell [[ '$(subst ','\'',$(TESTBED_NAME))' =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$$ ]] && echo ok),ok)
$(error TESTBED_NAME='$(TESTBED_NAME)' is not a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters))
endif

GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(GPULAB_CACHE)/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
ACTIONLINT_VERSION ?= v1.7.12
ACTIONLINT    := $(GPULAB_CACHE)/tools/actionlint-$(ACTIONLINT_VERSION)/actionlint
TESTBED       := $(BIN)/gpulab-testbed
TEST_TIMEOUT  ?= 45m
# What `--version` and gpulab_build_info say, from internal/version/stamp:
# the VERSION file (or the v* tag HEAD is exactly on), the commit with
# -dirty for a changed tree, the build date (SOURCE_DATE_EPOCH when set).
# Resolved once, on first use; the release workflow asks the same command.
LDFLAGS = $(eval LDFLAGS := $$(shell $(GO) run ./internal/version/cmd/stamp))$(or $(LDFLAGS),$(error internal/version/cmd/stamp printed no -ldflags))

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "usage: make <target>\n"} \
		/^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build every gpulab binary into bin/.
	$(GO) build ./...
	$(GO) build -ldflags "$(LDFLAGS)" -o $(TESTBED) ./testbeds/cmd/gpulab-testbed
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-agent ./node-agent/cmd/gpulab-agent
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance

.PHONY: generate
generate: ## Generate deepcopy code for the API types.
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Generate the CRDs (operator/config/crd/bases, copied into charts/gpulab/crds) and the operator's RBAC (operator/config/rbac/role.yaml).
	$(GO) tool controller-gen crd:generateEmbeddedObjectMeta=true,maxDescLen=0 paths=./api/... \
		output:crd:artifacts:config=operator/config/crd/bases
	$(GO) tool controller-gen rbac:roleName=gpulab-operator paths=./operator/... \
		output:rbac:artifacts:config=operator/config/rbac
	cp operator/config/crd/bases/*.yaml charts/gpulab/crds/

CHART_OUT ?= $(CURDIR)/_artifacts/chart
.PHONY: chart
chart: ## Lint the Helm chart (charts/gpulab) as helm lint --strict does and package it into CHART_OUT (_artifacts/chart); its version must equal VERSION.
	$(GO) run ./charts/cmd/gpulab-chart --chart=charts/gpulab --out=$(CHART_OUT) --version-file=VERSION

.PHONY: fmt
fmt: ## gofmt every Go file.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet every package.
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) $(ACTIONLINT) ## Run golangci-lint with .golangci.yml, and actionlint on .github/workflows (with shellcheck when installed).
	$(GOLANGCI_LINT) run ./...
	$(ACTIONLINT)

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(ACTIONLINT):
	GOBIN=$(dir $@) $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

##@ Testing

# The conformance package is the suite itself; `make test` runs it through
# `make conformance` at a scale that fits CI. go test starts packages in
# the order given, so the longest (each brings up testbeds) go first and
# the short ones fill in beside them, rather than the long ones starting
# last and running alone at the end.
SLOW_PKGS = conformance/faults operator/e2e operator/internal/controller/gpucluster testbeds/local \
	conformance/selftest internal/version dashboards conformance/cli
UNIT_PKGS = $$({ printf 'github.com/gpulab/gpulab/%s\n' $(SLOW_PKGS); $(GO) list ./... | grep -v '/conformance$$'; } | awk '!seen[$$0]++')
# Most tests wait on API servers and testbeds rather than compute: four
# packages at once keep both cores busy (measured 13m24s at -p 4 against
# 18m32s at the default -p 2, unit tests alone, nothing cached). The suite
# at scale 10 runs beside them, from the start: alone, at the end, it left
# the cores half idle for three minutes.
TEST_P ?= 4

# The user's kubeconfig ($KUBECONFIG, else ~/.kube/config) must be byte for
# byte the same after every test target: no test may add a context to it.
# A recipe starts with the snapshot and ends with the check, which sets rc=1
# when the file changed.
KUBECONFIG_SNAPSHOT = kc="$${KUBECONFIG:-$$HOME/.kube/config}"; before=$$(sha256sum "$$kc" 2>/dev/null || echo absent)
KUBECONFIG_CHECK = if [[ "$$(sha256sum "$$kc" 2>/dev/null || echo absent)" != "$$before" ]]; then echo "make $@ changed $$kc" >&2; rc=1; fi

.PHONY: test
# The test binaries are linked without DWARF (-w), which halves each link
# of some 60 of them; failures and panics still name file and line.
test: testbed-binaries-all ## Run every test: unit, envtest (real API server), the local testbed (real Volcano) and the conformance suite at scale 10.
	$(KUBECONFIG_SNAPSHOT); rc=0; \
	mkdir -p $(CURDIR)/_artifacts; log=$(CURDIR)/_artifacts/conformance-test.log; \
	$(MAKE) --no-print-directory conformance CONFORMANCE_SCALE=10 CONFORMANCE_OUT=$(CURDIR)/_artifacts/conformance-test >"$$log" 2>&1 & suite=$$!; \
	$(GO) test -p $(TEST_P) -ldflags=-w $(UNIT_PKGS) -timeout $(TEST_TIMEOUT) || rc=$$?; \
	suite_rc=0; wait $$suite || suite_rc=$$?; \
	echo "=== the suite at scale 10 (make conformance, run beside the unit tests; its log: $$log)"; cat "$$log"; \
	if (( rc == 0 )); then rc=$$suite_rc; fi; \
	$(KUBECONFIG_CHECK); exit $$rc

# The long tests make test skips (internal/testbin.LongEnv): each brings up
# a testbed with Karpenter or KubeRay beside Volcano and runs the suite's
# features for minutes. CI runs them right after make test.
LONG_TESTS = ^(TestPlantedMinMemberFailsAutoscaling|TestKarpenterAddsGPUNodes|TestOtherWorkloadsPass)$$

.PHONY: test-long
test-long: testbed-binaries-all ## Run the long tests make test skips: Karpenter's scale-up under the operator and the suite, RayClusters and Volcano Jobs through the suite at scale 10.
	$(KUBECONFIG_SNAPSHOT); rc=0; \
	GPULAB_LONG_TESTS=1 $(GO) test -ldflags=-w ./conformance/faults/ ./testbeds/local/ -run '$(LONG_TESTS)' -count=1 -v -timeout 30m || rc=$$?; \
	$(KUBECONFIG_CHECK); exit $$rc

.PHONY: test-short
test-short: ## Run only the fast tests (no API server, no testbed).
	$(GO) test -short ./...

# The shipped nightly CronJob (conformance/config/nightly) run as a process
# on a local testbed: its exact arguments, three nights (the first records
# the baseline ConfigMap, the second compares and passes, the third, with a
# planted slowdown, fails). Nine runs of the suite: too long for `make
# test`, so CI runs it after it. Like `make test`, it must leave the user's
# kubeconfig as it was.
.PHONY: test-nightly
test-nightly: testbed-binaries ## Run the shipped nightly CronJob's exact command three nights on a local testbed: record, compare, catch a planted slowdown.
	$(KUBECONFIG_SNAPSHOT); rc=0; \
	GPULAB_NIGHTLY_TEST=1 $(GO) test -ldflags=-w ./conformance/cli/ -run '^TestShippedCronJobNights$$' -count=1 -v -timeout 30m || rc=$$?; \
	$(KUBECONFIG_CHECK); exit $$rc

##@ Dashboards

.PHONY: dashboards
dashboards: ## Regenerate the Grafana dashboards, the PrometheusRule, the sidecar ConfigMaps and the chart's copies from Go.
	$(GO) generate ./dashboards

.PHONY: dashboards-check
dashboards-check: testbed-binaries-all ## Check dashboards and rules: schema, promtool, and every panel query on a real Prometheus over the local testbed.
	$(GO) test ./dashboards/... -v -timeout 20m

##@ Conformance

CONFORMANCE_SCALE ?= 100
CONFORMANCE_OUT   ?= $(CURDIR)/_artifacts/conformance
CONFORMANCE_ARGS  ?=
# The gangs to measure: gpucluster (gpulab's operator), raycluster (KubeRay,
# which the testbed then runs) or vcjob (Volcano Jobs).
WORKLOAD          ?= gpucluster
# Who gang-schedules the gpucluster workload: volcano or kubernetes
# (kube-scheduler's own gangs; the local testbed turns the gate on).
SCHEDULER         ?= volcano
GPU_ALLOCATION    ?= extended-resource

# PROFILE=kind runs it on a fresh kind cluster instead (Docker, root; the
# node image is built first if missing: `make kind-image`).
PROFILE           ?= local

# SUITE_EXIT_FILE is set by hack/suite-exit.sh: the recipe then writes the
# suite's exit code there and succeeds, and the script exits with it. make
# itself turns every failed recipe into 2, so without the script 1 (failed
# or regressed), 2 (cannot compare) and 3 (partial) all read as 2.
SUITE_EXIT_FILE ?=
suite_exit = if [[ -n "$(SUITE_EXIT_FILE)" ]]; then echo $$rc > "$(SUITE_EXIT_FILE)"; exit 0; fi; exit $$rc
# A cluster profile runs on nodes that exist: nothing to build for them.
SUITE_BINARIES = $(if $(filter cluster,$(PROFILE)),,$(if $(filter karpenter,$(TESTBED_AUTOSCALER)),testbed-binaries-karpenter,testbed-binaries))

.PHONY: conformance
conformance: $(SUITE_BINARIES) ## Run the conformance suite on a fresh local testbed (PROFILE=local|kind|cluster, CONFORMANCE_SCALE=100, WORKLOAD=gpucluster|raycluster|vcjob|bare, SCHEDULER=volcano|kubernetes, GPU_ALLOCATION=extended-resource|dra, TESTBED_AUTOSCALER=karpenter) and print the report; hack/suite-exit.sh conformance returns its exit code (0 passed, 1 failed, 3 partial).
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance
	rc=0; $(BIN)/gpulab-conformance run --verbose --timeout=40m --profile=$(PROFILE) --workload=$(WORKLOAD) --scheduler=$(SCHEDULER) --gpu-allocation=$(GPU_ALLOCATION) --scale=$(CONFORMANCE_SCALE) \
		--out=$(CONFORMANCE_OUT) $(if $(filter local,$(PROFILE)),--operator-binary=$(BIN)/gpulab-operator $(if $(filter karpenter,$(TESTBED_AUTOSCALER)),--autoscaler=karpenter)) $(CONFORMANCE_ARGS) || rc=$$?; \
	$(suite_exit)

NIGHTLY_RUNS     ?= 3
NIGHTLY_OUT      ?= $(CURDIR)/_artifacts/nightly
# The baseline lives where the nightly runs: the local testbed's is this
# repository's (recorded on the project's 2-CPU machine: another host class
# is refused, exit 2; point NIGHTLY_BASELINE at a directory of your own and
# the first night records it); kind's and a cluster's stay on this machine
# unless NIGHTLY_BASELINE=configmap:NAMESPACE/NAME keeps it in the cluster.
NIGHTLY_BASELINE ?= $(if $(filter local,$(PROFILE)),conformance/baselines/local,$(CURDIR)/_artifacts/baselines/$(PROFILE))
# The compare's flags: only the operator's own phase (create→pods created),
# create→Ready and throughput fail the night (each gated measurement is
# another chance of a false alarm; bind spread and queue wait flapped in
# make noise-check); the rest are shown.
NIGHTLY_COMPARE_ARGS ?= --gate='^latency/(create_to_pods_created|create_to_pods_ready|gangs_per_second)$$'
# 1 lets a partial run (an assessment asked for could not run) pass.
NIGHTLY_ALLOW_PARTIAL ?=
PUSHGATEWAY_URL  ?=

# The night is one command, `gpulab-conformance nightly` (the CronJob's and
# CI's too): runs, median, push, comparison, first-night recording and the
# exit code (0 nothing regressed, 1 regression or failed run, 2 cannot
# compare, 3 partial), which hack/suite-exit.sh nightly returns past make.
.PHONY: nightly
nightly: $(SUITE_BINARIES) ## Run the suite NIGHTLY_RUNS times (PROFILE=local|kind|cluster; cluster: KUBECONFIG and the footprint in CONFORMANCE_ARGS), push the median if PUSHGATEWAY_URL is set, and compare the runs with NIGHTLY_BASELINE (recorded there on the first night); hack/suite-exit.sh nightly returns its exit code.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance
	rc=0; $(BIN)/gpulab-conformance nightly --runs=$(NIGHTLY_RUNS) --out=$(NIGHTLY_OUT) --baseline=$(NIGHTLY_BASELINE) \
		--perfdata=$(NIGHTLY_OUT)/perfdata $(if $(PUSHGATEWAY_URL),--pushgateway-url=$(PUSHGATEWAY_URL)) \
		$(if $(filter 1,$(NIGHTLY_ALLOW_PARTIAL)),--allow-partial) $(NIGHTLY_COMPARE_ARGS) \
		-- --verbose --timeout=40m --profile=$(PROFILE) --scale=$(CONFORMANCE_SCALE) \
		$(if $(filter local,$(PROFILE)),--operator-binary=$(BIN)/gpulab-operator) $(CONFORMANCE_ARGS) || rc=$$?; \
	$(suite_exit)

COMPARE_ROUNDS ?= 3
COMPARE_SCALES ?= 100,300
COMPARE_LIMITS ?= same
COMPARE_IDENTITY ?= admin
COMPARE_OUT    ?= $(CURDIR)/_artifacts/compare-operators
.PHONY: compare-operators
compare-operators: testbed-binaries-kuberay ## Measure the floor (no operator), gpulab's operator and KubeRay side by side (a testbed per COMPARE_SCALES, a warm-up and COMPARE_ROUNDS rotating rounds, the operators at COMPARE_LIMITS: same, shipped or WORKERS/QPS/BURST, gpulab's as COMPARE_IDENTITY: admin, serviceaccount or serviceaccount-apf) and print the tables with intervals.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/compare-operators ./conformance/cmd/compare-operators
	$(BIN)/compare-operators --scales=$(COMPARE_SCALES) --rounds=$(COMPARE_ROUNDS) --limits=$(COMPARE_LIMITS) --operator-identity=$(COMPARE_IDENTITY) --suite=$(BIN)/gpulab-conformance \
		--operator-binary=$(BIN)/gpulab-operator --out=$(COMPARE_OUT)

SCHEDULERS_SCALE    ?= 100
SCHEDULERS_ROUNDS   ?= 3
SCHEDULERS_VOLCANOS ?= v1.14.1,v1.10.0
SCHEDULERS_OUT      ?= $(CURDIR)/_artifacts/compare-schedulers
.PHONY: compare-schedulers
compare-schedulers: $(TESTBED) ## Measure the same gangs on each Volcano of SCHEDULERS_VOLCANOS (a testbed each, all up at once) and on Kubernetes' native gangs (beside the first): gang and latency features, a warm-up and SCHEDULERS_ROUNDS rotating rounds; print the table with intervals.
	for v in $$(echo $(SCHEDULERS_VOLCANOS) | tr , " "); do $(TESTBED) build --volcano-version=$$v || exit 1; done
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/compare-schedulers ./conformance/cmd/compare-schedulers
	$(BIN)/compare-schedulers --scale=$(SCHEDULERS_SCALE) --rounds=$(SCHEDULERS_ROUNDS) --volcano-versions=$(SCHEDULERS_VOLCANOS) \
		--suite=$(BIN)/gpulab-conformance --operator-binary=$(BIN)/gpulab-operator --out=$(SCHEDULERS_OUT)

COMPARE_AUTOSCALING_ROUNDS    ?= 3
COMPARE_AUTOSCALING_WORKLOADS ?= gpucluster,bare,raycluster,vcjob
COMPARE_AUTOSCALING_TESTBED   ?= gpulab-autoscaling
COMPARE_AUTOSCALING_OUT       ?= $(CURDIR)/_artifacts/compare-autoscaling
.PHONY: compare-autoscaling
compare-autoscaling: $(TESTBED) ## Run the autoscaling feature on a local testbed with Karpenter for Volcano and Kubernetes' native gangs, each with COMPARE_AUTOSCALING_WORKLOADS (pairs that cannot run it are findings): a warm-up and COMPARE_AUTOSCALING_ROUNDS rotating rounds; print the table with intervals.
	$(TESTBED) build --autoscaler=karpenter $(if $(findstring raycluster,$(COMPARE_AUTOSCALING_WORKLOADS)),--kuberay)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/compare-autoscaling ./conformance/cmd/compare-autoscaling
	$(BIN)/compare-autoscaling --rounds=$(COMPARE_AUTOSCALING_ROUNDS) --workloads=$(COMPARE_AUTOSCALING_WORKLOADS) \
		--testbed-name=$(COMPARE_AUTOSCALING_TESTBED) --suite=$(BIN)/gpulab-conformance --operator-binary=$(BIN)/gpulab-operator \
		--out=$(COMPARE_AUTOSCALING_OUT)

BENCH_SCALES ?= 10,100,300,1000
BENCH_OUT    ?= $(CURDIR)/_artifacts/bench-scale
.PHONY: bench-scale
bench-scale: testbed-binaries ## Measure the operator at N=BENCH_SCALES gangs (one testbed each, pprof on) and write the table, SVG plots and profiles to _artifacts/bench-scale.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/bench-scale ./conformance/cmd/bench-scale
	$(BIN)/bench-scale -n=$(BENCH_SCALES) --suite=$(BIN)/gpulab-conformance --operator-binary=$(BIN)/gpulab-operator --out=$(BENCH_OUT)

NOISE_RUNS          ?= 20
NOISE_PLANTED_RUNS  ?= 10
NOISE_COMPARISONS   ?= 10
NOISE_PLANTED_DELAY ?= 1500ms
NOISE_REUSE         ?= 0
NOISE_OUT           ?= $(CURDIR)/_artifacts/noise-check
# The comparisons use the nightly's compare flags unless told otherwise.
NOISE_COMPARE_ARGS  ?= $(NIGHTLY_COMPARE_ARGS)
export NOISE_RUNS NOISE_PLANTED_RUNS NOISE_COMPARISONS NOISE_PLANTED_DELAY NOISE_REUSE NOISE_OUT
.PHONY: noise-check
noise-check: testbed-binaries ## Measure the nightly compare's false alarms and power: NOISE_RUNS unchanged and NOISE_PLANTED_RUNS slowed latency runs (N=CONFORMANCE_SCALE), drawn into 3-vs-3 comparisons (NOISE_REUSE=1 redraws only).
	BIN=$(BIN) LDFLAGS="$(LDFLAGS)" CONFORMANCE_SCALE=$(CONFORMANCE_SCALE) conformance/hack/noise-check.sh $(NOISE_COMPARE_ARGS)

FROM ?=
.PHONY: baseline
baseline: ## Promote runs to the nightly baseline NIGHTLY_BASELINE (a directory, or configmap:NAMESPACE/NAME in the cluster): make baseline FROM=_artifacts/nightly (every run in it), or FROM=one/results.json into a .json file.
	@[[ -n "$(FROM)" ]] || { echo "usage: make baseline FROM=_artifacts/nightly (a directory of runs, or results.json files)" >&2; exit 2; }
	$(GO) test -c -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-conformance ./conformance
	$(BIN)/gpulab-conformance baseline promote --to $(NIGHTLY_BASELINE) $(FROM)

##@ Local testbed

# Each command builds only what it runs: a testbed needs etcd, Kubernetes,
# kwok and Volcano; KubeRay's operator is built when a testbed runs it
# (WORKLOAD=raycluster), Prometheus and the Pushgateway for the dashboards.
.PHONY: testbed-binaries
testbed-binaries: $(TESTBED) ## Build etcd, Kubernetes, kwok and Volcano (VOLCANO_VERSION) from the Go module proxy (cached), and KubeRay's operator (KUBERAY_VERSION) for WORKLOAD=raycluster.
	$(TESTBED) build $(if $(filter raycluster,$(WORKLOAD)),--kuberay) \
		$(if $(VOLCANO_VERSION),,$(if $(filter dra,$(GPU_ALLOCATION)),$(if $(filter local,$(PROFILE)),--volcano-version=$(VOLCANO_DRA_VERSION))))

.PHONY: testbed-binaries-kuberay
testbed-binaries-kuberay: $(TESTBED) ## testbed-binaries and KubeRay's operator.
	$(TESTBED) build --kuberay

# A Go toolchain download of its own and minutes on 2 cores; make test
# needs it (the testbed's and the autoscaling feature's tests).
.PHONY: testbed-binaries-karpenter
testbed-binaries-karpenter: $(TESTBED) ## testbed-binaries and Karpenter's kwok provider (for TESTBED_AUTOSCALER=karpenter).
	$(TESTBED) build --autoscaler=karpenter

.PHONY: testbed-binaries-all
testbed-binaries-all: $(TESTBED) ## testbed-binaries, KubeRay's operator, Karpenter's kwok provider, Prometheus, promtool and the Pushgateway (what `make test` needs).
	$(TESTBED) build --kuberay --monitoring --autoscaler=karpenter

.PHONY: testbed-up
testbed-up: $(TESTBED) ## Start the local testbed (TESTBED_NODES=dgx-h100=4; TESTBED_KUBERAY=1 adds KubeRay's operator; TESTBED_NATIVE_GANGS=1 turns on Kubernetes' own gangs; TESTBED_AUTOSCALER=karpenter adds Karpenter; VOLCANO_VERSION, KUBERAY_VERSION) and print its kubeconfig.
	$(TESTBED) up $(if $(filter 1 true,$(TESTBED_KUBERAY)),--kuberay) $(if $(filter 1 true,$(TESTBED_NATIVE_GANGS)),--native-gangs) \
		--autoscaler=$(TESTBED_AUTOSCALER) $(if $(filter karpenter,$(TESTBED_AUTOSCALER)),--autoscaler-max-gpus=$(TESTBED_AUTOSCALER_MAX_GPUS))

.PHONY: testbed-down
testbed-down: $(TESTBED) ## Stop the local testbed and remove its state.
	$(TESTBED) down

.PHONY: testbed-status
testbed-status: $(TESTBED) ## Show the local testbed's processes, nodes and queue.
	$(TESTBED) status

.PHONY: run-operator
run-operator: ## Run the operator locally against the testbed (loopback metrics :18080, probes :18081).
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gpulab-operator ./operator/cmd/gpulab-operator
	$(BIN)/gpulab-operator --kubeconfig=$(GPULAB_CACHE)/kwok/clusters/$(TESTBED_NAME)/kubeconfig.yaml \
		--metrics-bind-address=127.0.0.1:18080 --health-probe-bind-address=127.0.0.1:18081

##@ Kind testbed (Docker, no registry)

KIND_WORKERS ?= 4
# How the agent hands out the kind workers' mock GPUs: device-plugin or dra.
KIND_GPU_ALLOCATION ?= device-plugin

.PHONY: kind-image
kind-image: $(TESTBED) ## Build the kind node image and its component images locally (cached; root for dockerd and debootstrap).
	$(TESTBED) kind-image

.PHONY: images
images: $(TESTBED) ## Build the gpulab-conformance image (the in-cluster runner) locally, tagged dev and VERSION (Docker; root for debootstrap).
	$(TESTBED) images

.PHONY: kind-up
kind-up: $(TESTBED) ## Create a kind cluster (KIND_WORKERS=4) with Volcano (VOLCANO_VERSION) and gpulab, from the local node image; KIND_GPU_ALLOCATION=dra runs the agent as a DRA driver.
	$(TESTBED) kind-up --workers $(KIND_WORKERS) --gpu-allocation $(KIND_GPU_ALLOCATION)

.PHONY: kind-down
kind-down: $(TESTBED) ## Delete the kind cluster.
	$(TESTBED) kind-down

.PHONY: test-kind
# The node image is built first, outside the tests' timeout.
test-kind: kind-image ## Run the kind testbed's cluster tests (Docker; GPULAB_KIND_WORKERS=1 by default); an unusable Docker fails them.
	$(TESTBED) docker-up
	GPULAB_KIND_TEST=1 $(GO) test ./testbeds/kind/ -count=1 -timeout 60m -v

.PHONY: $(TESTBED)
$(TESTBED):
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ ./testbeds/cmd/gpulab-testbed
