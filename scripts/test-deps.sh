#!/usr/bin/env bash
# Installs what the test suite needs and is not in go.mod: fuse3 (for
# fusermount3 and the kernel helpers), attr (getfattr/setfattr) and
# rsync, used by the end-to-end tests as a user would, tree, versitygw (a
# real S3 server, built from the Go module proxy), fake-gcs-server (a GCS
# emulator, from the Go module proxy), Azurite (the Azure Blob emulator,
# from npm; needs node and npm) and staticcheck. Idempotent: each step
# is skipped when its tool is already there at the pinned version.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=$PWD/.tools/bin
mkdir -p "$TOOLS"

VERSITYGW_VERSION=v1.8.0
STATICCHECK_VERSION=v0.8.2
FAKE_GCS_VERSION=v1.55.1
AZURITE_VERSION=3.37.0

need_apt=()
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
command -v getfattr >/dev/null || need_apt+=(attr)
command -v tree >/dev/null || need_apt+=(tree)
command -v rsync >/dev/null || need_apt+=(rsync)
command -v npm >/dev/null || need_apt+=(nodejs npm)
if ((${#need_apt[@]})); then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "test-deps: installing ${need_apt[*]} with apt-get" >&2
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
	else
		echo "test-deps: missing ${need_apt[*]}; install them (Debian/Ubuntu: sudo apt-get install ${need_apt[*]})" >&2
		exit 1
	fi
fi
if [[ ! -x $TOOLS/versitygw ]]; then
	echo "test-deps: building versitygw $VERSITYGW_VERSION into .tools/bin (about 80 s, once)" >&2
	GOBIN=$TOOLS go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi
if [[ ! -x $TOOLS/fake-gcs-server ]]; then
	echo "test-deps: building fake-gcs-server $FAKE_GCS_VERSION into .tools/bin (about 60 s, once)" >&2
	GOBIN=$TOOLS go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
fi
# Azurite goes into its own npm prefix under .tools/ (nothing global), and
# .tools/bin/azurite-blob links to it. The version file makes a bump of
# AZURITE_VERSION reinstall.
AZURITE_DIR=$PWD/.tools/azurite
if [[ ! -x $TOOLS/azurite-blob || $(cat "$AZURITE_DIR/.version" 2>/dev/null) != "$AZURITE_VERSION" ]]; then
	echo "test-deps: installing azurite $AZURITE_VERSION from npm into .tools/azurite (about 60 s, once)" >&2
	mkdir -p "$AZURITE_DIR"
	npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --omit=dev --loglevel=error "azurite@$AZURITE_VERSION" >&2
	ln -sf "$AZURITE_DIR/node_modules/.bin/azurite-blob" "$TOOLS/azurite-blob"
	echo "$AZURITE_VERSION" >"$AZURITE_DIR/.version"
fi
if [[ ! -x $TOOLS/staticcheck ]]; then
	echo "test-deps: building staticcheck $STATICCHECK_VERSION into .tools/bin" >&2
	GOBIN=$TOOLS go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
