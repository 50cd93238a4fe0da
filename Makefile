SHELL := /bin/bash
# The two commands of README.rst's Quick start.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: venv demo demo-framework simulate test typecheck docs bench zookeeper chromium image-tools iptables cc

$(BIN)/mesoslike: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/mesoslike

# The main job: the Fuxi word count on a local cluster (examples/fuxi_wordcount).
demo: venv
	$(BIN)/python examples/fuxi_wordcount/demo.py $(DEMO_ARGS)

# The plain-framework word count (a framework of its own, no Fuxi).
demo-framework: venv
	$(BIN)/mesoslike local --port 0 --http-port 0 -- $(BIN)/python examples/wordcount.py

simulate: venv
	$(BIN)/mesoslike simulate

# The HA tests need a real ZooKeeper server (Debian's package); install it
# when missing and we may (root with apt). Outside CI its tests skip without it.
zookeeper:
	@if [ ! -f /usr/share/java/zookeeper.jar ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing ZooKeeper (Debian package zookeeper)"; \
	    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper) >/dev/null \
	      || echo "warning: could not install zookeeper"; \
	  else \
	    echo "warning: ZooKeeper is missing (as root: apt-get install zookeeper); its tests skip outside CI"; \
	  fi; \
	fi

# The partition suite (tests/test_partitions.py, docs/reliability.rst) cuts
# links between network namespaces with iptables (and ip from iproute2):
# Debian's iptables and iproute2, installed as ZooKeeper is.
iptables:
	@if ! command -v iptables >/dev/null || ! command -v ip >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing iptables and iproute2 (Debian packages)"; \
	    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables iproute2) >/dev/null \
	      || echo "warning: could not install iptables"; \
	  else \
	    echo "warning: iptables is missing (as root: apt-get install iptables iproute2); the partition suite skips outside CI"; \
	  fi; \
	fi

# The agent builds its namespace init helper (mesoslike/agent/nsinit.c) with
# the machine's C compiler on its first start; without one, namespaced tasks
# get Python supervisors of their own (a logged warning). The tests exercise
# both: Debian's gcc and libc6-dev, installed as ZooKeeper is.
cc:
	@if ! command -v "$${CC:-cc}" >/dev/null || [ ! -e /usr/include/stdio.h ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing a C compiler (Debian packages gcc libc6-dev)"; \
	    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc libc6-dev) >/dev/null \
	      || echo "warning: could not install gcc"; \
	  else \
	    echo "warning: no C compiler (as root: apt-get install gcc libc6-dev); tasks with namespaces get a Python supervisor each"; \
	  fi; \
	fi

# The dashboard's tests (tests/test_dashboard.py) drive a real headless
# Chromium: Debian's chromium and chromium-driver, installed as ZooKeeper is.
chromium:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Chromium (Debian packages chromium chromium-driver)"; \
	    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver) >/dev/null \
	      || echo "warning: could not install chromium"; \
	  else \
	    echo "warning: Chromium is missing (as root: apt-get install chromium chromium-driver); the dashboard's browser tests fail without it"; \
	  fi; \
	fi

# Containers and images (docs/containers.rst): runc runs a task's OCI bundle
# (crun refuses this kernel's hybrid cgroups); the image tests start Debian's
# docker-registry, build images from busybox-static and push some with skopeo;
# zstd unpacks zstd layers, openssl signs the test registry's tokens. umoci is
# there for building OCI bundles by hand. Installed as ZooKeeper is.
image-tools:
	@missing=""; \
	for tool in runc:/usr/sbin/runc docker-registry:/usr/bin/docker-registry skopeo:/usr/bin/skopeo \
	            umoci:/usr/bin/umoci busybox-static:/bin/busybox zstd:/usr/bin/zstd openssl:/usr/bin/openssl; do \
	  [ -x "$${tool#*:}" ] || missing="$$missing $${tool%%:*}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing (Debian packages)"; \
	    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing) >/dev/null \
	      || echo "warning: could not install$$missing"; \
	  else \
	    echo "warning: missing$$missing (as root: apt-get install$$missing); the container and image tests skip outside CI"; \
	  fi; \
	fi

# mypy over both import packages, mesoslike (mesoslike/) and mesoslike_frameworks
# (frameworks/mesoslike_frameworks/): setup.cfg's [mypy] names them and where
# they are, so a plain `python -m mypy` in the repository checks the same.
typecheck: venv
	$(BIN)/python -m mypy

# The documentation site (docs/conf.py) into build/docs: warnings are errors
# and every cross-reference must resolve (nitpicky). `make test` builds it
# through pytest (tests/test_docs_site.py runs this same command), not here.
DOCS_BUILD = $(BIN)/python -m sphinx -E -W --keep-going -n -q -b html
docs: venv
	$(DOCS_BUILD) docs build/docs
	@echo "docs: build/docs/index.html"

test: venv zookeeper chromium image-tools iptables cc typecheck
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/allocator.py
