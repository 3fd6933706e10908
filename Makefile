# husk — the two commands of the quickstart are `make run` and `make test`.
# Both install what is missing with apt (as root), so they work on a fresh
# Debian bookworm machine.

GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# What huskd needs to run containers; musl-tools builds the guest's C init
# (shim/agent/cinit) as a small static program; git clones remote build
# contexts, as dockerd uses it.
RUN_PKGS  := qemu-system-x86 linux-image-cloud-amd64 e2fsprogs iproute2 musl-tools git
MUSL_CC  ?= musl-gcc
# What the tests need beyond that: a real registry, busybox for test images,
# docker-py and dockerode (real SDKs in the e2e suite), and Debian's dockerd,
# the reference the differential test compares huskd with.
TEST_PKGS := $(RUN_PKGS) docker-registry busybox-static python3-docker docker.io
HUSKD_FLAGS ?=

.PHONY: all build deps-run deps-test run test unit e2e bench kernel qemu lint clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/husk-agent ./cmd/husk-agent
	@mkdir -p $(BIN)
	$(MUSL_CC) -static -Os -Wall -Wextra -Werror -o $(BIN)/husk-init shim/agent/cinit/src/init.c
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/huskd ./cmd/huskd
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/husk ./cmd/husk

# apt_install installs the packages of $(1) that are not installed yet. It
# starts none of their services (docker.io's dockerd, docker-registry's
# registry): the tests start their own, inside namespaces of their own, and
# a host dockerd would put its bridge and rules on the host's network. A
# policy-rc.d already in place (as in Docker's Debian images) is kept.
define apt_install
	@missing=""; for p in $(1); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		policy=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
			policy=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > $$policy && chmod 755 $$policy; \
		fi; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
		status=$$?; [ -z "$$policy" ] || rm -f $$policy; exit $$status; \
	fi
endef

deps-run:
	$(call apt_install,$(RUN_PKGS))

deps-test:
	$(call apt_install,$(TEST_PKGS))
	@# Node.js from Debian only when there is none: a Node.js from elsewhere
	@# (e.g. nodesource, which bundles npm) conflicts with Debian's npm.
	@command -v npm >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm)
	@# dockerode from npm, pinned by the committed lock file; no install scripts.
	@test -f e2e/testdata/node/node_modules/dockerode/package.json || \
		(cd e2e/testdata/node && npm ci --ignore-scripts --no-audit --no-fund)

# run starts huskd in the foreground on unix:///run/husk/docker.sock.
run: deps-run build
	$(BIN)/huskd $(HUSKD_FLAGS)

# test builds the minimal QEMU too (make qemu), for the e2e test that
# runs huskd --qemu with it.
test: deps-test build qemu lint unit e2e

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -count=1 ./...

# e2e drives the real docker CLI against a real huskd booting real VMs,
# inside a network namespace the suite creates. The suite's own packages
# (harness, test images) go first. The tests that hold huskd to the
# reference dockerd (E2E_REFERENCE_TESTS; a test that asks for the
# reference in the other run fails, saying so) run in a suite of their
# own beside the rest: most of the rest waits on guests and timeouts
# with the CPUs idle, and the differential test keeps them busy. Each
# suite's output goes to a file, printed when both are done, a failed
# one last, so that its summary of what its failed tests said ends the
# output, where a CI log's tail shows it.
E2E_ENV = HUSK_E2E=1 HUSK_BIN_DIR=$(CURDIR)/$(BIN) HUSK_E2E_QEMU=$(QEMU_MINIMAL)
E2E_REFERENCE_TESTS = ^(TestDifferential|TestClientGoneMidRequest|TestPausedContainerServesItsFiles|TestPauseKeepsTheGuestsTime)$$
e2e:
	$(E2E_ENV) $(GO) test -count=1 -v $$($(GO) list ./e2e/... | grep -vx '$(shell $(GO) list ./e2e)')
	@echo "e2e: two suites at once; their output is in $(BIN)/e2e-reference.log and $(BIN)/e2e-others.log until both end"
	@$(E2E_ENV) $(GO) test -count=1 -v -timeout 40m -run '$(E2E_REFERENCE_TESTS)' ./e2e > $(BIN)/e2e-reference.log 2>&1 & pid=$$!; \
	$(E2E_ENV) HUSK_E2E_REFERENCE=off $(GO) test -count=1 -v -timeout 40m -skip '$(E2E_REFERENCE_TESTS)' ./e2e > $(BIN)/e2e-others.log 2>&1; others=$$?; \
	wait $$pid; reference=$$?; \
	for run in "others $$others" "reference $$reference"; do set -- $$run; [ $$2 -ne 0 ] || cat $(BIN)/e2e-$$1.log; done; \
	for run in "others $$others" "reference $$reference"; do set -- $$run; [ $$2 -eq 0 ] || cat $(BIN)/e2e-$$1.log; done; \
	echo "e2e: the reference suite exited $$reference, the others' $$others"; [ $$reference -eq 0 ] && [ $$others -eq 0 ]

# bench reports medians of side-by-side runs against the VMM's floor and
# Debian's dockerd + runc, and writes bench/results.json and
# bench/latency.png; it never fails on time. BENCH_RUNS runs per scenario.
BENCH_PKGS := $(TEST_PKGS) debootstrap
BENCH_RUNS ?= 7
# The minimal kernel `make kernel` built, if any, is compared with Debian's.
BENCH_KERNEL ?= $(lastword $(sort $(filter-out %.monolithic %.tmp,$(wildcard $(KERNEL_DIR)/bzImage-*))))
# So is the QEMU `make qemu` built (QEMU_MINIMAL, below).
BENCH_QEMU ?= $(QEMU_MINIMAL)
bench: build
	$(call apt_install,$(BENCH_PKGS))
	HUSK_E2E=1 HUSK_E2E_BENCH=1 HUSK_BENCH_RUNS=$(BENCH_RUNS) HUSK_BENCH_OUT=$(CURDIR)/bench HUSK_BIN_DIR=$(CURDIR)/$(BIN) \
		HUSK_BENCH_KERNEL=$(BENCH_KERNEL) HUSK_BENCH_QEMU=$(BENCH_QEMU) \
		$(GO) test -count=1 -v -timeout 90m -run '^TestBench$$' ./e2e/ > $(BIN)/bench.log 2>&1; \
		status=$$?; grep -E 'bench:|^(ok|FAIL|---)' $(BIN)/bench.log; \
		[ $$status -eq 0 ] || echo "make bench failed: see $(BIN)/bench.log"; exit $$status

# kernel builds the minimal guest kernel (kernel/guest.config over
# tinyconfig, no modules) from Debian's linux-source into KERNEL_DIR; pass
# the bzImage it prints to huskd --kernel, or to make bench as
# HUSK_BENCH_KERNEL.
KERNEL_DIR ?= /var/cache/husk/kernel
KERNEL_PKGS := linux-source build-essential bc bison flex libelf-dev libssl-dev xz-utils
kernel:
	$(call apt_install,$(KERNEL_PKGS))
	./kernel/build.sh $(KERNEL_DIR)

# qemu builds a QEMU with only the devices and features husk's VMs use
# (runtime/vmm/qemu/minimal) from the source of the installed Debian qemu
# package into QEMU_DIR; pass the binary it prints to huskd --qemu, or to
# make bench as BENCH_QEMU.
QEMU_DIR ?= /var/cache/husk/qemu
QEMU_PKGS := qemu-system-x86 build-essential dpkg-dev ninja-build meson pkg-config python3 \
	libglib2.0-dev libpixman-1-dev libseccomp-dev libfdt-dev zlib1g-dev
# QEMU_MINIMAL is the binary it builds from the installed qemu package's
# source, once it is there.
QEMU_MINIMAL = $(shell ./runtime/vmm/qemu/minimal/build.sh --built $(QEMU_DIR))
qemu:
	$(call apt_install,$(QEMU_PKGS))
	./runtime/vmm/qemu/minimal/build.sh $(QEMU_DIR)

clean:
	rm -rf $(BIN)
