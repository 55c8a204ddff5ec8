#!/usr/bin/env bash
# Installs what the test suite needs and is not in go.mod: fuse3 (for
# fusermount3 and the kernel helpers), attr (getfattr/setfattr, used by the
# end-to-end tests as a user would), versitygw (a real S3 server, built from
# the Go module proxy) and staticcheck. Idempotent: each step is skipped when
# its tool is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=$PWD/.tools/bin
mkdir -p "$TOOLS"

VERSITYGW_VERSION=v1.8.0
STATICCHECK_VERSION=v0.8.2

need_apt=()
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
command -v getfattr >/dev/null || need_apt+=(attr)
command -v tree >/dev/null || need_apt+=(tree)
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
if [[ ! -x $TOOLS/staticcheck ]]; then
	echo "test-deps: building staticcheck $STATICCHECK_VERSION into .tools/bin" >&2
	GOBIN=$TOOLS go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
