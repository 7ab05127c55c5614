# Sink — developer commands. Tool versions are pinned here; tools build from
# the Go module proxy into .bin/<version>/ on first use.
SHELL := bash
GO ?= go

BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
PROTOC_GEN_GO_VTPROTO_VERSION := v0.6.0
STATICCHECK_VERSION        := v0.8.2

BIN := $(CURDIR)/.bin
BUF := $(BIN)/buf-$(BUF_VERSION)/buf
PROTOC_GEN_GO := $(BIN)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(BIN)/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)/protoc-gen-go-grpc
PROTOC_GEN_GO_VTPROTO := $(BIN)/protoc-gen-go-vtproto-$(PROTOC_GEN_GO_VTPROTO_VERSION)/protoc-gen-go-vtproto
STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
# PG_CHECK succeeds when the PostgreSQL binaries the tests start are installed (internal/testkit/pgtest).
PG_CHECK := { command -v initdb >/dev/null 2>&1 || [ -x "$$(pg_config --bindir 2>/dev/null)/initdb" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || [ -n "$$SINK_TEST_POSTGRES_URL" ]

# Test timeout per package; the whole suite stays well under CI's limit.
TEST_FLAGS ?= -count=1 -timeout 15m

.PHONY: all build run test test-race test-unit test-integration test-ferretdb-pg test-faults test-history soak lint proto bench fuzz tools clean help

all: lint test

help:
	@echo "make build             build the sink binary into .bin/sink (BINARY=path to change)"
	@echo "make run               build and run Sink (memory storage unless SINK_MONGODB_URI is set; example merge profiles of examples/profiles.yaml)"
	@echo "make test              run every test, integration tests included (starts its own servers)"
	@echo "make test-race         run every test with the race detector"
	@echo "make test-unit         run the tests that need no MongoDB or Kafka server"
	@echo "make test-integration  run only the MongoDB- and Kafka-backed tests"
	@echo "make test-ferretdb-pg  the MongoDB adapter's conformance and mark tests on FerretDB over PostgreSQL"
	@echo "make test-faults       container fault suite (Docker; FAULTS_TRIALS=worker-sigkill=20,db-pause=5,...; FAULTS_DB=postgres)"
	@echo "make test-history      long linearizability histories of the synchronous API (HISTORY_OPS operations per client)"
	@echo "make soak              the fault cycle in a loop on the container cluster for SOAK_DURATION (default 10m)"
	@echo "make lint              go vet, staticcheck, gofmt, go mod tidy check, buf lint"
	@echo "make proto             regenerate the committed protobuf code"
	@echo "make bench             run the benchmarks"
	@echo "make fuzz              run every fuzz target in turn, FUZZTIME each (default 30s)"

# make build puts the sink binary here; make run builds it and then runs it
# with exec, so Ctrl-C reaches Sink itself and a clean shutdown ends with
# Sink's exit status (0), not `go run`'s (1).
BINARY ?= $(BIN)/sink

build:
	$(GO) build -o $(BINARY) ./cmd/sink

# make run loads the example declarative merge profiles (counter, tally,
# latest, events, order-status; docs/profiles.md) unless
# SINK_MERGE_PROFILES_FILE says otherwise (make run SINK_MERGE_PROFILES_FILE=
# for none).
SINK_MERGE_PROFILES_FILE ?= examples/profiles.yaml

run: build
	SINK_MERGE_PROFILES_FILE='$(SINK_MERGE_PROFILES_FILE)' exec $(BINARY)

# The test FerretDB's own module (tools/ferretdb: its write gate) is tested
# with the rest.
test:
	@$(PG_CHECK) || echo "PostgreSQL tests will skip: no initdb/postgres on PATH or in pg_config --bindir (apt-get install postgresql, or set SINK_TEST_POSTGRES_URL)"
	$(GO) test $(TEST_FLAGS) ./...
# domain's portable twin of its amd64 assembly (build tag purego):
	$(GO) test $(TEST_FLAGS) -tags purego ./domain
	cd tools/ferretdb && GOWORK=off $(GO) test $(TEST_FLAGS) ./...

test-race:
	$(GO) test -race $(TEST_FLAGS) ./...

test-unit:
	SINK_TEST_SKIP_MONGODB=1 $(GO) test $(TEST_FLAGS) -short ./...

# Packages whose tests talk to a real MongoDB-wire server or Kafka broker.
INTEGRATION_PKGS := ./integration/... ./internal/testkit/... ./adapters/mongodb/... ./adapters/kafka/...

test-integration:
	$(GO) test $(TEST_FLAGS) $(INTEGRATION_PKGS)

# The MongoDB adapter's conformance and applied-mark tests on FerretDB over
# a PostgreSQL server of its own (internal/testkit/mongotest,
# SINK_TEST_FERRETDB_BACKEND=postgresql; needs the PostgreSQL binaries),
# whatever server make test used: FerretDB's PostgreSQL backend evaluates
# filters differently from its SQLite one (docs/mongodb.md).
FERRETDB_PG_TESTS := ^(TestConformance|TestScanConformance|TestMark.*)$$

test-ferretdb-pg:
	env -u SINK_TEST_MONGODB_URI SINK_TEST_NO_DOCKER=1 SINK_TEST_FERRETDB_BACKEND=postgresql \
		$(GO) test $(TEST_FLAGS) -run '$(FERRETDB_PG_TESTS)' ./adapters/mongodb/

# The container fault suite (integration/faults): FROM scratch images, a
# Docker network, faults injected under load, a reliability table. It skips
# with one line when no Docker engine answers. FAULTS_TRIALS overrides the
# trial counts per fault (name=count,...). Mutations applied twice fail the
# suite (effectively-once delivery); FAULTS_REQUIRE_ONCE=0 only reports them.
FAULTS_TRIALS ?=
FAULTS_REQUIRE_ONCE ?= 1
# FAULTS_STATIC=1: the workers are static group members (SINK_KAFKA_INSTANCE_ID).
FAULTS_STATIC ?=
# FAULTS_DB=postgres: the trials run against PostgreSQL (an image built FROM
# scratch from the installed binaries) with their own defaults (db-pause,
# db-kill, db-connections, worker-sigkill: 3 each); default: the MongoDB-wire
# server.
FAULTS_DB ?=

test-faults:
	SINK_FAULTS=1 SINK_FAULTS_TRIALS='$(FAULTS_TRIALS)' SINK_FAULTS_REQUIRE_ONCE='$(FAULTS_REQUIRE_ONCE)' SINK_FAULTS_STATIC='$(FAULTS_STATIC)' SINK_FAULTS_DB='$(FAULTS_DB)' \
		$(GO) test -count=1 -timeout 20m -v -run '^TestFaults' ./integration/faults/

# The soak (integration/faults/soak_test.go): worker kill, worker freeze,
# broker restart and database pause in a loop under alternating async and
# sync load, for SOAK_DURATION; SOAK_REPORT names a file for its table.
SOAK_DURATION ?= 10m
SOAK_REPORT ?=

soak:
	SINK_FAULTS=1 SINK_SOAK='$(SOAK_DURATION)' SINK_FAULTS_REPORT='$(SOAK_REPORT)' SINK_FAULTS_STATIC='$(FAULTS_STATIC)' \
		$(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./integration/faults/

# Long histories of the synchronous API checked for linearizability
# (integration/history_test.go); make test runs short ones.
HISTORY_OPS ?= 5000

test-history:
	SINK_HISTORY_OPS='$(HISTORY_OPS)' SINK_HISTORY_CHECK_TIMEOUT=10m $(GO) test -count=1 -timeout 60m -v -run '^TestHistory' ./integration/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...

# Every fuzz target: package and name. Their seed corpora (and FuzzRPCBytes'
# seeded random batch) already run in make test; this fuzzes each in turn.
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./integration:FuzzRPCBytes \
	./domain:FuzzDecodeAddress \
	./domain:FuzzCheckJSON \
	./adapters/kafka:FuzzDecodeMutation \
	./adapters/mergepatch:FuzzMergeJSON \
	./adapters/mergepatch:FuzzMergeBSON \
	./adapters/declarative:FuzzDeclarative \
	./adapters/mongodb:FuzzStoredDocumentRoundTrip \
	./proto/vtcodec:FuzzUnmarshalAgreesWithProto \
	./adapters/mongodb:FuzzParseBindings \
	./adapters/mongodb:FuzzScanDifferential \
	./adapters/postgres:FuzzScanDifferential \
	./adapters/memory:FuzzScanJSONAndBSON \
	./internal/celfilter:FuzzCompile \
	./adapters/auth:FuzzParseAuthorizationFile

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzzing $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -count=1 -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

lint: $(STATICCHECK) $(BUF)
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	$(BUF) lint

proto: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(PROTOC_GEN_GO_VTPROTO)
	PATH="$(dir $(PROTOC_GEN_GO)):$(dir $(PROTOC_GEN_GO_GRPC)):$(dir $(PROTOC_GEN_GO_VTPROTO)):$$PATH" $(BUF) generate

tools: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(PROTOC_GEN_GO_VTPROTO) $(STATICCHECK)

$(BUF):
	GOBIN=$(dir $@) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(PROTOC_GEN_GO):
	GOBIN=$(dir $@) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(dir $@) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(PROTOC_GEN_GO_VTPROTO):
	GOBIN=$(dir $@) $(GO) install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(PROTOC_GEN_GO_VTPROTO_VERSION)
$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

clean:
	rm -rf $(BIN)
