#!/usr/bin/env bash
# run-demo.sh BIN DEMO_DIR MNT: what `make run` does after building. It
# checks that FUSE can work here (saying what to install when it cannot),
# writes a demo bucket into DEMO_DIR with `BIN demo` unless one is there,
# clears a stale mount a crashed pugfs left on MNT, prints what to try, and
# then runs `BIN mount DEMO_DIR MNT` in the foreground: Ctrl-C unmounts.
set -euo pipefail

if (($# != 3)); then
	echo "usage: $0 BIN DEMO_DIR MNT" >&2
	exit 2
fi
BIN=$1 DIR=$2 MNT=$3

# FUSE needs the kernel device, and an unprivileged user needs the setuid
# fusermount3 helper to mount. Checking first turns an obscure mount error
# into the one command that fixes it.
if [[ ! -e /dev/fuse ]]; then
	echo "run-demo: /dev/fuse is missing, so nothing can be mounted here." >&2
	echo "  Install FUSE:          sudo apt-get install fuse3   (then: sudo modprobe fuse)" >&2
	echo "  In a container:        docker run --device /dev/fuse --cap-add SYS_ADMIN ..." >&2
	exit 1
fi
if [[ $(id -u) -ne 0 ]] && ! command -v fusermount3 >/dev/null; then
	echo "run-demo: fusermount3 is missing; a non-root user needs it to mount." >&2
	echo "  Install it:            sudo apt-get install fuse3" >&2
	exit 1
fi

# Write the demo only into an absent or empty directory: an existing bucket
# (an earlier make run, with whatever was written through the mount since)
# is kept. `rm -rf DEMO_DIR` starts over.
if [[ ! -d $DIR ]] || [[ -z $(ls -A -- "$DIR") ]]; then
	"$BIN" demo "$DIR"
else
	echo "run-demo: using the existing bucket in $DIR (rm -rf it for a fresh demo)"
fi

# A pugfs that was killed leaves its mount behind: every access to it then
# fails with ENOTCONN ("Transport endpoint is not connected") until it is
# unmounted.
if ! err=$(LC_ALL=C stat -- "$MNT" 2>&1 >/dev/null); then
	if [[ $err == *"not connected"* ]]; then
		echo "run-demo: $MNT is a stale mount left by a pugfs that died; unmounting it"
		if ! fusermount3 -u -- "$MNT" 2>/dev/null && ! fusermount3 -uz -- "$MNT" 2>/dev/null && ! umount -l -- "$MNT" 2>/dev/null; then
			echo "run-demo: cannot unmount $MNT; run: fusermount3 -uz $MNT (or, as root: umount -l $MNT)" >&2
			exit 1
		fi
	fi
fi
if grep -qF -- " $(realpath -m -- "$MNT" | sed 's/\\/\\134/g; s/ /\\040/g') " /proc/self/mountinfo 2>/dev/null; then
	echo "run-demo: something is already mounted on $MNT; unmount it first: fusermount3 -u $MNT" >&2
	exit 1
fi
mkdir -p -- "$MNT"

# The main demo session's ID, for the hints. `session new --name demo` is
# read-only when the name exists (it prints that session's ID), so it is
# only asked when refs/sessions/demo is there.
ID="<id>"
if [[ -f $DIR/refs/sessions/demo ]]; then
	ID=$("$BIN" session new --name demo "$DIR") || ID="<id>"
fi

S=$MNT/sessions/$ID
cat <<EOF

Mounting $DIR on $MNT. In another terminal, try:

  ls $MNT/sessions                       # every session, by ID
  ls $S                                  # the "demo" session's latest state
  cat $S/notes/today.md
  grep -r TODO $MNT/sessions/
  getfattr -d $S/config.json             # descriptor fields as xattrs (apt-get install attr)
  ls $S/.pugmark                         # history: snapshots/, at/<N>/, log.jsonl, forks/
  cat $S/.pugmark/at/1/src/main.go       # main.go as it was at version 1
  ls -l $MNT/names/ $MNT/memories/team/notes/
  echo hello > $S/hello.txt              # a commit

Ctrl-C unmounts.

EOF
exec "$BIN" mount "$DIR" "$MNT"
