# hoard: `make run` serves the example projects.json on a supervised local
# redis-server (installing Debian's redis-server first when it is missing);
# `make test` installs what the tests use on Debian (.ci/deps) and runs every
# test (CI runs exactly this, through .ci/run); `make unit` is the fast tier:
# pure Go, no Redis, answers in seconds.
GO      ?= go
BIN     := bin/hoard
FUZZTIME ?= 30s
# Which packages `make test` runs, e.g. make test PKGS=./leaderboard/...
PKGS    ?= ./...
# pipefail: make test's exit code is go test's as well as the summary's.
SHELL   := /bin/bash
# The Node 22 .ci/deps installs when the system's is older than 20 (Debian
# 12's is 18) comes first; without it the PATH is unchanged in effect.
export PATH := $(CURDIR)/.ci/node/bin:$(PATH)

.PHONY: all build run run-deps test test-race unit test-long vet deps check-go bench fuzz chaos clean install install-files
CHAOSTIME ?= 5m

all: build

# Debian's packages the tests use (--no-install-recommends; sudo unless
# root), a check that Go is new enough (with where to get it when not),
# Node 22 in .ci/node when the system's is older than 20, and
# leaderboard/e2e's npm packages. make test runs it first.
deps:
	.ci/deps

# redis-server for make run's supervised Redis, from Debian's packages when
# it is missing (apt-get as root or through sudo; otherwise the command to
# run is printed). Nothing when HOARD_REDIS_URL names a Redis.
run-deps:
	@.ci/deps --redis

# A clear message, naming the version go.mod needs and where to get it,
# instead of go's own "invalid go version" when the toolchain is too old.
check-go:
	@GO=$(GO) .ci/deps --check go

build: check-go
	$(GO) build -o $(BIN) ./cmd/hoard
	$(GO) build -o bin/hoard-bittorrent ./cmd/hoard-bittorrent

# Install as a service: binaries in $(PREFIX)/bin, the systemd unit, an
# environment file in /etc/hoard (kept if it exists: it holds the admin
# token), and, when installing into the real root, a `hoard` system user
# owning /var/lib/hoard. DESTDIR stages into a directory instead (no user,
# no systemctl). docs/operators.md has the steps.
PREFIX  ?= /usr/local
DESTDIR ?=
BINS    ?= bin/hoard bin/hoard-bittorrent
# Under sudo, PATH is sudo's secure_path, which rarely holds Go: then the
# message says how to build as yourself and install as root.
install:
	@if command -v $(GO) >/dev/null 2>&1; then $(MAKE) --no-print-directory build; \
	elif [ "$(GO)" = go ] && [ -x /usr/local/go/bin/go ]; then $(MAKE) --no-print-directory build GO=/usr/local/go/bin/go; \
	else echo "make install: no Go in this PATH (sudo resets PATH). Build as yourself, then install as root:"; \
		echo '  make build && sudo make install-files'; \
		echo 'or tell sudo where Go is:  sudo make install GO="$$(command -v go)"'; exit 1; fi
	@$(MAKE) --no-print-directory install-files

install-files:
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)/etc/systemd/system $(DESTDIR)/etc/hoard
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' contrib/systemd/hoard.service > $(DESTDIR)/etc/systemd/system/hoard.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/hoard.service
	[ -e $(DESTDIR)/etc/hoard/hoard.env ] || install -m 0640 contrib/systemd/hoard.env $(DESTDIR)/etc/hoard/hoard.env
	[ -e $(DESTDIR)/etc/hoard/hoard.toml ] || { sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' contrib/systemd/hoard.toml > $(DESTDIR)/etc/hoard/hoard.toml && chmod 0640 $(DESTDIR)/etc/hoard/hoard.toml; }
	[ -s $(DESTDIR)/etc/hoard/admin-token ] || { (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > $(DESTDIR)/etc/hoard/admin-token); chmod 0640 $(DESTDIR)/etc/hoard/admin-token; }
	@if [ -z "$(DESTDIR)" ]; then \
		id -u hoard >/dev/null 2>&1 || useradd --system --home-dir /var/lib/hoard --shell /usr/sbin/nologin hoard; \
		install -d -o hoard -g hoard -m 0750 /var/lib/hoard; \
		chgrp hoard /etc/hoard/hoard.env /etc/hoard/hoard.toml /etc/hoard/admin-token; \
		if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi; \
		echo "installed: review /etc/hoard/hoard.toml (hoard config check /etc/hoard/hoard.toml), then: systemctl enable --now hoard"; \
		echo "the CLI's token: export HOARD_ADMIN_TOKEN=\$$(sudo cat /etc/hoard/admin-token)"; \
	fi

# The admin token is generated once into data/admin-token (unless
# HOARD_ADMIN_TOKEN is set); the CLI needs the same value.
run: build run-deps
	@mkdir -p data
	@[ -s data/admin-token ] || (head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > data/admin-token && chmod 600 data/admin-token)
	@echo "admin token: export HOARD_ADMIN_TOKEN=$$(cat data/admin-token)"
	HOARD_ADMIN_TOKEN=$${HOARD_ADMIN_TOKEN:-$$(cat data/admin-token)} $(BIN) serve --create-listed-projects

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (echo "gofmt needed:"; gofmt -l .; exit 1)
	$(GO) vet $(PKGS)

# Every test, on a real redis-server and a real 3-node Redis Cluster that
# the tests start themselves (internal/redistest); fuzz seeds run as tests.
# internal/testsummary prints a line per package, each failure with its
# output, every skip with its reason and "N passed, N failed, N skipped";
# under CI=true a skip not marked "by design:" fails the run.
#
# Most test packages spend their time waiting (on redis-servers, plugin
# processes, real clients, Chromium), so four run at once, not one per CPU.
# RACE=1 adds the race detector (CI sets it, .ci/run): it costs CPU in
# every test and a -race link per test binary, so with it the run keeps
# one package per CPU.
RACE    ?=
TESTP   ?= $(if $(filter 1,$(RACE)),,-p 4)
# go test starts packages in the order it is given them, so the longest
# (CI's run, docs/testing.md) go first and the short ones fill in beside
# them: given alphabetically, queues and swarm started last and the run
# ended with them alone. ./... after them adds the rest once each.
LONGEST := ./queues ./plugins/bittorrent/swarm ./plugins/bittorrent/btplugin \
	./server ./plugins/bittorrent/reaper ./plugins/pluginhost ./cmd/hoard \
	./internal/chaos ./internal/localredis ./plugins/bittorrent/orphans
TESTPKGS = $(if $(filter ./...,$(PKGS)),$(LONGEST) ./...,$(PKGS))
test: deps vet
	$(GO) build -o bin/testsummary ./internal/testsummary
	set -o pipefail; $(GO) test -json $(if $(filter 1,$(RACE)),-race) $(TESTP) -count=1 -timeout 45m $(TESTPKGS) | bin/testsummary

# make test with the race detector, as CI runs it.
test-race:
	RACE=1 $(MAKE) test

# The fast tier: go test -short, no -race, no Redis started (a test that
# needs one skips, saying so; internal/redistest), no Debian packages
# needed. Under a minute on a 2-core machine; make test is the real run.
unit: check-go
	$(GO) build -o bin/testsummary ./internal/testsummary
	set -o pipefail; $(GO) test -json -short -count=1 -timeout 5m $(PKGS) | bin/testsummary

# The long, sample-sized runs too (HOARD_TEST_LONG=1): the Bloom filter's
# false-positive rate on 1M items at 1e-6 and 40 segment-cleanup races per
# backend. CI runs these.
test-long:
	HOARD_TEST_LONG=1 $(MAKE) test

# Load generators, not timed tests, kept in their own binary, out of the one
# operators run. .ci/bench runs them and the Go benchmarks and writes their
# output, with the commands and the machine, to docs/figures.md.
# BENCH_VS=<an older bin/hoard> runs the warrior path side by side with it.
BENCH_VS ?=
bench: build
	$(GO) build -o bin/hoard-bench ./cmd/hoard-bench
	GO=$(GO) BENCH_VS=$(BENCH_VS) .ci/bench

# The chaos suite for minutes (make test runs it for 20 s): the real
# binaries on loopback, frontends, plugins and redis-server SIGKILLed under
# 32 warriors, on one redis-server, on a 3-master cluster and on hoard's
# own supervised redis-server (half as long each), then every item checked
# in Redis. See docs/testing.md, "Chaos".
chaos:
	HOARD_CHAOS_DURATION=$(CHAOSTIME) $(GO) test -count=1 -v -timeout 60m -run '^TestChaos' ./internal/chaos

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseWarriorPath$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./server
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeWarriorBodies$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./server
	$(GO) test -run '^$$' -fuzz '^FuzzSplitBackfeed$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./server
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeAdminBodies$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./server
	$(GO) test -run '^$$' -fuzz '^FuzzParseAnnounceQuery$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParseUDPPacket$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParseCursor$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/outbox
	$(GO) test -run '^$$' -fuzz '^FuzzVerifySignature$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/outbox
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/outbox
	$(GO) test -run '^$$' -fuzz '^FuzzBencodeWriter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzHTTPAnnounceWriter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzHTTPScrapeWriter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzFailureWriter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzUDPAnnounceWriter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzUDPScrapeWriter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParseScrapeQuery$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParsePath$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParseURLData$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzLocationMetricNames$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/ipmetrics
	$(GO) test -run '^$$' -fuzz '^FuzzParseHTTPAnnounceResponse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/wire
	$(GO) test -run '^$$' -fuzz '^FuzzUDPAnnounceReply$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./plugins/bittorrent/announcer

clean:
	rm -rf bin
