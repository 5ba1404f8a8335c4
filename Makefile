# sluice — build, test and run. `make` lists the targets.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO      ?= go
BIN     := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The build version: main.version of sluice and sluice-agent, and
# cmdutil.Version, which every service binary announces (micro service,
# instance presence, sluice_build_info).
LDFLAGS := -s -w -X main.version=$(VERSION) -X github.com/sluicehq/sluice/pkg/cmdutil.Version=$(VERSION)

# Every module of the workspace (go.work), as ./path patterns: the root module
# (everything sluice builds and tests) and deploy/helm/test, kept apart so the
# helm SDK's dependencies stay out of the product's (docs/architecture.md).
MODULES = $(patsubst $(CURDIR)%,.%,$(shell $(GO) list -m -f '{{.Dir}}'))
PKGS    = $(addsuffix /...,$(MODULES))

# Binaries: name → package.
SERVICES := sluice-configurator sluice-rollout-coordinator sluice-agent sluice-reaper
BINARIES := sluice $(SERVICES) nats-server
pkg.sluice                     := ./cmd/sluice
pkg.sluice-configurator        := ./services/configurator/cmd/sluice-configurator
pkg.sluice-rollout-coordinator := ./services/rollout-coordinator/cmd/sluice-rollout-coordinator
pkg.sluice-agent               := ./services/agent/cmd/sluice-agent
pkg.sluice-reaper              := ./services/reaper/cmd/sluice-reaper
# nats-server is built from the Go module the root module requires, so images
# need nothing pulled.
pkg.nats-server                := github.com/nats-io/nats-server/v2
# probe: the nats-server image's healthcheck (GET a URL, exit 0 on 200).
pkg.probe                      := ./deploy/probe

SEEDS         ?= 50
SEED_BASE     ?= 1
MUTANT_SEEDS  ?= 200
# Mutation runs on virtual time (a process per seed, from the lowest seed:
# "the first catch" is the lowest catching seed); 0 runs them on real time.
MUTANT_VIRTUAL ?= 1
CHAOS_TIMEOUT ?= 30m

IMAGE_PREFIX ?= sluice
IMAGE_TAG    ?= dev
REVISION     ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The agent image's shell and tools: a static busybox (Debian's busybox-static).
BUSYBOX      ?= /bin/busybox

# The nats CLI `make natscli` installs into bin/ (the container tests run it).
NATSCLI_VERSION ?= v0.5.1

PROTOC       ?= protoc
PROTO_FILES  := $(wildcard proto/sluice/v1/*.proto)
PROTO_MODULE := github.com/sluicehq/sluice

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "; n = 0; w = 0} /^[a-zA-Z0-9_-]+:.*## / {name[n] = $$1; text[n] = $$2; n++; if (length($$1) > w) w = length($$1)} \
		END {for (i = 0; i < n; i++) printf "  %-*s  %s\n", w, name[i], text[i]}' $(MAKEFILE_LIST)

# bin/sluice is built (as make build does) and run in the recipe's place
# (exec): Ctrl-C then ends make with sluice dev's own exit code, 0. Through
# `go run`, which exits 1 when interrupted, make ended "Error 1".
.PHONY: run
run: $(BIN)/sluice ## Run everything locally: embedded NATS, all services, 5 agents, the dashboard at http://127.0.0.1:3100 (sluice dev; flags in ARGS="...")
	exec $(BIN)/sluice dev $(ARGS)

.PHONY: test
test: redis promtool chromium frr gpg ## go vet and go test every module of the workspace (installs redis-server, promtool, chromium, FRR and gpg first if missing)
	@echo "modules: $(MODULES)"
	$(GO) vet $(PKGS)
	SLUICE_REQUIRE_FRR=1 $(GO) test -count=1 -timeout 20m $(PKGS)

# deploy/prometheus/alerts.yaml, checked and unit-tested with promtool
# (Debian's prometheus package, installed like redis-server).
.PHONY: alerts
alerts: promtool ## Check the Prometheus alert rules in deploy/prometheus and run their unit tests with promtool (make test does, in tests/alerts)
	promtool check rules deploy/prometheus/alerts.yaml
	cd deploy/prometheus && promtool test rules alerts_test.yaml

.PHONY: test-secure
test-secure: ## Run the end-to-end suite on a NATS server in operator mode: each component as its role's user, each agent its node's; a refused permission fails (SLUICE_TEST_SECURE=1)
	SLUICE_TEST_SECURE=1 $(GO) test -count=1 -timeout 20m ./tests/e2e/...

# Fuzz targets: every `func Fuzz...` of a test file, FUZZTIME each
# (tests/fuzz.sh). A failing input is written to the package's
# testdata/fuzz/<target>/: commit it with the fix, and make test runs it
# from then on (with the seeds).
FUZZTIME         ?= 10s
FUZZMINIMIZETIME ?= 5s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 10s, e.g. FUZZTIME=1m); a failing input lands in testdata/fuzz/
	FUZZTIME=$(FUZZTIME) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) GO=$(GO) tests/fuzz.sh

# Tests of the Redis registry start real redis-server processes
# (internal/testkit/redistest); they fail, never skip, without one.
.PHONY: redis
redis: ## Install Debian's redis-server if it is missing (make test does this first)
	$(call apt-install,redis-server,redis-server,the Redis registry's tests need it)

# apt-install: install Debian's package $(2) unless command $(1) is there
# already; $(3) says what needs it.
define apt-install
@command -v $(1) >/dev/null && exit 0; \
echo "$(1) not found: $(3); installing Debian's $(2)"; \
sudo=""; if [ "$$(id -u)" -ne 0 ]; then sudo="sudo"; fi; \
$$sudo apt-get install -y $(2) || { $$sudo apt-get update && $$sudo apt-get install -y $(2); } || \
{ echo "could not install $(1): install it (apt-get install $(2)) and run make test again" >&2; exit 1; }
endef

# The alert rules and the Grafana dashboard in deploy/ are checked with
# promtool (tests/alerts), the dashboard's pages in a real headless Chromium
# (chromedp); those tests fail, never skip, without them.
.PHONY: promtool
promtool: ## Install Debian's prometheus (for promtool) if promtool is missing (make test does this first)
	$(call apt-install,promtool,prometheus,the tests of deploy/prometheus/alerts.yaml need it)

# The git registry's signed-commit tests sign with a real gpg
# (internal/testkit/gittest); they fail, never skip, without it.
.PHONY: gpg
gpg: ## Install Debian's gnupg if gpg is missing (make test does this first: the OpenPGP signed-commit tests)
	$(call apt-install,gpg,gnupg,the OpenPGP signed-commit tests need it)

.PHONY: chromium
chromium: ## Install Debian's chromium if it is missing (make test does this first: the dashboard's browser tests)
	$(call apt-install,chromium,chromium,the dashboard's browser tests need it)

# The FRR applier's tests run real FRR daemons in network namespaces
# (internal/testkit/frrtest); make test sets SLUICE_REQUIRE_FRR=1, so
# there they fail, never skip, without FRR or root.
.PHONY: frr
frr: ## Install Debian's frr and frr-pythontools (frr-reload.py) if missing (make test does this first: the FRR applier's tests)
	$(call apt-install,vtysh,frr frr-pythontools,the FRR applier's tests need it)
	$(call apt-install,/usr/lib/frr/frr-reload.py,frr-pythontools,the FRR applier's reload needs it)

.PHONY: chaos
chaos: redis ## Run SEEDS seeded fault schedules (default 50) against the real services (installs redis-server first if missing: the Redis registry seeds); a failing seed prints its repro line, and is run once more alone: "failed again" or "passed alone (load?)"
	CHAOS_SEEDS=$(SEEDS) CHAOS_SEED_BASE=$(SEED_BASE) CHAOS_TIMEOUT=$(CHAOS_TIMEOUT) CHAOS_FLAGS='$(CHAOS_FLAGS)' GO=$(GO) tests/chaos/run.sh

# tests/overload (build tag overload, so make test leaves it out): 10,000
# agents through a proxy that makes JetStream answer 2 s late for 30 s.
.PHONY: test-overload
test-overload: ## 10,000 agents, JetStream answering 2 s late for 30 s: the fleet must offer no more requests than when steady, lose no presence, and be back to its steady rate 10 s after (about 4 minutes)
	$(GO) vet -tags overload ./tests/overload/...
	$(GO) test -tags overload -count=1 -v -timeout 15m ./tests/overload/...

# The netlink applier in network namespaces (needs root, as make test has
# here): docs/agent.md, "Trying the netlink applier".
.PHONY: netns-demo
netns-demo: ## As root: 3 nodes as network namespaces on a fabric; a VXLAN network rolls out through the netlink applier, then a broken VNI is caught by the gateway check and rolled back (prints each step)
	$(GO) test -count=1 -v -run 'TestEndToEnd_NetlinkApplier' ./tests/e2e/

# The FRR applier end to end (needs root and Debian's frr and
# frr-pythontools, which the frr target installs): docs/agent.md, "Trying
# the FRR applier".
.PHONY: frr-demo
frr-demo: frr ## As root: 3 nodes and a spine as namespaces, each its own FRR; a VRF route rolls out through netlink,frr agents, a route map dropping a checked prefix is rolled back, a config FRR cannot take is Invalid before any reload (prints each step)
	SLUICE_REQUIRE_FRR=1 $(GO) test -count=1 -v -run 'TestEndToEnd_FRR' ./tests/e2e/

# The tests that need kernel VRFs (this machine kind's kernel has no
# CONFIG_NET_VRF), in Debian's kernel under qemu (TCG, one vCPU):
# tests/kernel/run.sh installs qemu-system-x86, linux-image-amd64 and
# busybox-static when missing.
.PHONY: test-kernel
test-kernel: ## The netlink applier's VRF tests, its checks, the netns demo and the FRR applier's kernel-VRF route leaking (host FRR over 9p) in Debian's kernel under qemu, where a skip is a failure (installs qemu and the kernel if missing; about 4.5 minutes)
	GO=$(GO) BIN=$(BIN) tests/kernel/run.sh

# The chart and the agent on a real Kubernetes API server and etcd
# (deploy/helm/test/kube): build.sh builds both from the Go module proxy
# once per machine into $XDG_CACHE_HOME/sluice/kube (about 5 minutes cold,
# nothing after); make test leaves these tests out (build tag kube).
.PHONY: test-kube
test-kube: ## The chart installed, upgraded, uninstalled and refused on a real kube-apiserver and etcd, the agent reading its Node and the configurator's Kubernetes registry syncing with the chart's RBAC, das-schiff's and sluice's custom resources synced, their status written, deletions settled and held (builds both once per machine into ~/.cache/sluice/kube, about 5 minutes cold)
	cd deploy/helm/test && GO=$(GO) kube/build.sh >/dev/null && $(GO) test -tags kube -count=1 -v -timeout 20m -run 'TestKube' .

.PHONY: mutants
mutants: redis ## Mutation-test the chaos suite: each tests/chaos/mutants/*.patch on a copy of the tree, seeds on virtual time until the first catch (MUTANT_SEEDS, default 200; MUTANTS='01-*'; MUTANT_VIRTUAL=0 for real time); prints the score. Not in CI (about 7 minutes)
	CHAOS_VIRTUAL=$(MUTANT_VIRTUAL) MUTANT_SEEDS=$(MUTANT_SEEDS) MUTANTS='$(MUTANTS)' GO=$(GO) tests/chaos/mutants/run.sh

.PHONY: chaos-virtual
chaos-virtual: ## The chaos suite on virtual time (testing/synctest): SEEDS seeds from SEED_BASE, a process per seed, one per core at a time; R3 seeds are left to make chaos
	SEEDS=$(SEEDS) SEED_BASE=$(SEED_BASE) GO=$(GO) tests/chaos/virtual.sh

.PHONY: chaos-long
chaos-long: ## 1,350 seeds on virtual time (about 1,000 run; the rest are R3 seeds, real time only): under 10 minutes on 2 cores
	SEEDS=1350 SEED_BASE=$(SEED_BASE) GO=$(GO) tests/chaos/virtual.sh

.PHONY: chaos-secure
chaos-secure: redis ## The chaos suite on NATS in operator mode: each service as its role's user, each agent its node's; a refused permission fails the seed (SEEDS, SEED_BASE as chaos)
	SLUICE_TEST_SECURE=1 CHAOS_SEEDS=$(SEEDS) CHAOS_SEED_BASE=$(SEED_BASE) CHAOS_TIMEOUT=$(CHAOS_TIMEOUT) CHAOS_FLAGS='$(CHAOS_FLAGS)' GO=$(GO) tests/chaos/run.sh

# The container suite (tests/containers, build tag containers, so make test
# leaves it out): the images on a private Docker network — three NATS
# servers, R3 buckets, two coordinators, the configurator, the reaper, four
# agents — with faults put in from outside. docs/deploy.md, "Container tests".
.PHONY: e2e-containers
e2e-containers: images natscli ## Build the images and the nats CLI, then run tests/containers: faults in a 3-server NATS cluster of containers
	$(GO) vet -tags containers ./tests/containers/...
	SLUICE_IMAGE_PREFIX='$(IMAGE_PREFIX)' SLUICE_IMAGE_TAG='$(IMAGE_TAG)' SLUICE_NATSCLI='$(BIN)/nats' \
	$(GO) test -tags containers -count=1 -v -timeout 30m ./tests/containers/... $(CONTAINERS_FLAGS)

.PHONY: e2e-containers-secure
e2e-containers-secure: images natscli ## tests/containers with deploy/nats-secure.conf: operator mode, TLS, each container its own user; a refused permission fails
	$(GO) vet -tags containers ./tests/containers/...
	SLUICE_TEST_SECURE=1 SLUICE_IMAGE_PREFIX='$(IMAGE_PREFIX)' SLUICE_IMAGE_TAG='$(IMAGE_TAG)' SLUICE_NATSCLI='$(BIN)/nats' \
	$(GO) test -tags containers -count=1 -v -timeout 30m ./tests/containers/... $(CONTAINERS_FLAGS)

# From the Go module proxy, at the version NATSCLI_VERSION pins.
.PHONY: natscli
natscli: ## Install the nats CLI into bin/nats, at the version NATSCLI_VERSION pins (from the Go module proxy)
	GOBIN='$(BIN)' $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

.PHONY: bench
bench: bench-frr ## bench-frr, then measure a rollout over 1,000 simulated agents, a failing wave, a killed, a stopped and a paused leader; ends with one line BENCH {json} (BENCH_ARGS="--nodes 10000")
	$(GO) build -o $(BIN)/sluice-bench ./tests/cmd/sluice-bench
	$(BIN)/sluice-bench $(BENCH_ARGS)

# The FRR applier against real FRR (frrtest: root, Debian's frr): docs/agent.md,
# "Apply time". BENCH_FRR_OPS operations per case; p99 of 20 is the slowest.
BENCH_FRR_OPS ?= 20
BENCH_SCALE_SIZES ?= 30000 100000
.PHONY: bench-frr
bench-frr: frr ## The FRR applier's apply-to-checked time for 50 VRF routes in 10 VRFs against real FRR: a changed config, the same again, frr-reload alone (p50/p99, BENCH lines; BENCH_FRR_OPS=20)
	SLUICE_REQUIRE_FRR=1 $(GO) test -count=1 -run '^$$' -bench 'BenchmarkApply_50RoutesIn10VRFs$$' -benchtime $(BENCH_FRR_OPS)x ./services/agent/frr/ | grep -E '^(Benchmark|BENCH|ok|FAIL|--- )|_test\.go:'

# The dashboard's page in headless Chromium (build tag dashboardbench, so
# make test leaves it out): docs/benchmarks.md, "The dashboard's page".
.PHONY: bench-dashboard
bench-dashboard: chromium ## The dashboard: its page in headless Chromium (paint 10,000 and 100,000 nodes, frames/s during a rollout at maxParallel 1000) and its server at 10,000 nodes (BENCH lines)
	$(GO) vet -tags dashboardbench ./cmd/sluice/internal/cli/
	$(GO) test -tags dashboardbench -count=1 -v -run 'TestDashboard_(Render|Server)Bench$$' ./cmd/sluice/internal/cli/ | grep -E 'BENCH|^(--- |ok|FAIL)'

# The fleet verifier at the issue's size: docs/benchmarks.md, "The fleet verifier".
.PHONY: bench-verify
bench-verify: ## The fleet verifier (pkg/verify) on 10,000 intents and 100,000 nodes, each node a label set of its own: ns/op, goal ≤ 2 s
	$(GO) test -count=1 -run '^$$' -bench 'BenchmarkVerify_100kNodes10kIntents$$' -benchtime 5x ./pkg/verify/

# The dashboard's in-force check: docs/benchmarks.md, "The dashboard's in-force check".
.PHONY: bench-inforce
bench-inforce: ## The dashboard's in-force check (cmd/sluice/internal/view) when a revision comes in force: 10,000 nodes in 100 racks, then each node a label set of its own (ns/op)
	$(GO) test -count=1 -run '^$$' -bench 'BenchmarkInForce_10kNodes' -benchmem ./cmd/sluice/internal/view/

# Both runs run even when the first fails; the target fails if either did.
.PHONY: bench-scale
bench-scale: ## Not run in CI, minutes: BENCH_SCALE_SIZES (30,000 then 100,000) simulated agents (maxParallel 1000, apply 100 ms, the failure and failover scenarios off), each after the transport's floor at its size (--floor); a table of each component's messages and processor time per node, then a BENCH line, per size (BENCH_SCALE_ARGS="...")
	$(GO) build -o $(BIN)/sluice-bench ./tests/cmd/sluice-bench
	status=0; \
	for n in $(BENCH_SCALE_SIZES); do \
		$(BIN)/sluice-bench --floor --nodes $$n --max-parallel 1000 --apply-ms 100 || status=1; \
		$(BIN)/sluice-bench --nodes $$n --max-parallel 1000 --apply-ms 100 --failover=false --fail-wave 0 $(BENCH_SCALE_ARGS) || status=1; \
	done; \
	exit $$status

# protoc writes Go into $(1), at paths relative to the module root.
protoc-go = PATH="$(BIN):$$PATH" $(PROTOC) -I proto --go_out=$(1) --go_opt=module=$(PROTO_MODULE) $(PROTO_FILES)

.PHONY: proto
proto: protoc $(BIN)/protoc-gen-go ## Regenerate proto/sluicev1 from proto/sluice/v1/*.proto
	$(call protoc-go,.)

.PHONY: proto-check
proto-check: protoc $(BIN)/protoc-gen-go ## Fail when proto/sluicev1 is not what the .proto files generate
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call protoc-go,$$tmp); \
	diff -ru proto/sluicev1 "$$tmp/proto/sluicev1" || { echo "generated code is stale: run make proto" >&2; exit 1; }
	@echo "generated code is up to date"

.PHONY: protoc
protoc:
	@command -v $(PROTOC) >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }

# protoc-gen-go at the version go.mod requires, so generated code is reproducible.
$(BIN)/protoc-gen-go: go.mod
	$(GO) build -o $@ google.golang.org/protobuf/cmd/protoc-gen-go

.PHONY: build
build: $(addprefix $(BIN)/,$(BINARIES)) ## Build static binaries into bin/

# Always rebuilt: go build is incremental and knows the real dependencies.
.PHONY: $(addprefix $(BIN)/,$(BINARIES) probe)
$(addprefix $(BIN)/,$(BINARIES) probe):
	@[ -x $@ ] || echo "building $@ (the first build downloads the modules and compiles everything: a minute or two on a fresh machine)"
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ $(pkg.$(notdir $@))

# Credentials and certificates for deploy/compose/secure.yaml, made once
# (remove deploy/compose/secrets to start over). The users' files and the
# server key are made readable by the containers' user (65532): a demo on
# this machine; docs/security.md says what production does instead.
SECRETS := deploy/compose/secrets
.PHONY: compose-secrets
compose-secrets: $(BIN)/sluice ## Make NATS credentials (a user per service and per agent) and a local CA for docker-compose with deploy/compose/secure.yaml
	@if [ -f $(SECRETS)/operator.nk ]; then echo "$(SECRETS) exists: keeping it (remove it to start over)"; exit 0; fi; \
	set -e; \
	$(BIN)/sluice creds init --dir $(SECRETS) --resolver-dir /data/jwt; \
	for role in configurator coordinator coordinator reaper admin readonly; do $(BIN)/sluice creds issue $$role --dir $(SECRETS); done; \
	for i in 1 2 3 4 5 6; do $(BIN)/sluice creds issue node --node node-0$$i --dir $(SECRETS); done; \
	$(BIN)/sluice creds tls --dir $(SECRETS) --hosts nats-1,nats-2,nats-3,localhost,127.0.0.1; \
	chmod a+r $(SECRETS)/users/*.creds $(SECRETS)/tls/server.key; chmod a+rx $(SECRETS) $(SECRETS)/users $(SECRETS)/tls

.PHONY: compose-dashboard-token
compose-dashboard-token: ## Make the token docker-compose's dashboard requires (deploy/compose/secrets/dashboard.token; kept if it exists)
	@mkdir -p $(SECRETS); \
	if [ -f $(SECRETS)/dashboard.token ]; then echo "$(SECRETS)/dashboard.token exists: keeping it"; exit 0; fi; \
	head -c 24 /dev/urandom | base64 > $(SECRETS)/dashboard.token; chmod a+r $(SECRETS)/dashboard.token; \
	echo "wrote $(SECRETS)/dashboard.token: the dashboard at http://127.0.0.1:3100 asks for it"

# deploy/build-images.sh stages each image's files under bin/images/<bin>/
# and builds it with deploy/Dockerfile; docs/deploy.md says what is inside.
.PHONY: images
images: build $(BIN)/probe busybox ## Build one FROM-scratch, non-root image per binary (sluice/<bin>:dev, IMAGE_TAG=…) and list them with version and size
	BIN='$(BIN)' BINARIES='$(BINARIES)' IMAGE_PREFIX='$(IMAGE_PREFIX)' IMAGE_TAG='$(IMAGE_TAG)' \
	VERSION='$(VERSION)' REVISION='$(REVISION)' BUSYBOX='$(BUSYBOX)' deploy/build-images.sh

.PHONY: prometheus-image
prometheus-image: promtool ## Build sluice/prometheus:dev FROM scratch from Debian's prometheus (with the libc it links), for docker-compose --profile prometheus
	IMAGE_PREFIX='$(IMAGE_PREFIX)' IMAGE_TAG='$(IMAGE_TAG)' STAGE='$(BIN)/images/prometheus' deploy/prometheus/build-image.sh

# The agent image needs a statically linked busybox: Debian's busybox
# package is dynamic (and would not run FROM scratch); busybox-static
# replaces it.
.PHONY: busybox
busybox: ## Install Debian's busybox-static if /bin/busybox (BUSYBOX=…) is missing or dynamically linked (make images needs it)
	@if [ -x '$(BUSYBOX)' ] && ! ldd '$(BUSYBOX)' >/dev/null 2>&1; then exit 0; fi; \
	echo "no static busybox at $(BUSYBOX): the agent image needs one; installing Debian's busybox-static"; \
	sudo=""; if [ "$$(id -u)" -ne 0 ]; then sudo="sudo"; fi; \
	$$sudo apt-get install -y busybox-static || { $$sudo apt-get update && $$sudo apt-get install -y busybox-static; } || \
	{ echo "could not install busybox-static: install it (apt-get install busybox-static) or set BUSYBOX=/path/to/static/busybox" >&2; exit 1; }

.PHONY: clean
clean: ## Remove bin/ (sluice dev's data stays in .sluice: remove it to start over)
	rm -rf $(BIN)
