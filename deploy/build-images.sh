#!/usr/bin/env bash
# Builds one FROM-scratch image per binary in bin/ with deploy/Dockerfile,
# each from its own staging directory (bin/images/<binary>/), so nothing is
# pulled and each build context holds only the image's files. `make images`
# runs it after `make build`; the variables below come from the Makefile.
#
# Every image holds /entrypoint (the static binary), /etc/passwd and
# /etc/group naming the user 65532 (nonroot) it runs as, the host's CA
# certificates, and one directory owned by 65532 for its state
# (STATE_DIR). Besides:
#   sluice-agent  /bin/busybox (Debian's busybox-static) with a link per
#                 applet, so --check-cmd, --validate-cmd and the exec applier
#                 (all run with /bin/sh -c) work; /tmp (1777) for the exec
#                 applier's config file.
#   nats-server   /probe (deploy/probe), its healthcheck.
set -euo pipefail

: "${BIN:?}" "${BINARIES:?}" "${IMAGE_PREFIX:?}" "${IMAGE_TAG:?}" "${VERSION:?}"
REVISION=${REVISION:-unknown}
BUSYBOX=${BUSYBOX:-/bin/busybox}
CA_CERTS=${CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}
DOCKERFILE=$(cd "$(dirname "$0")" && pwd)/Dockerfile
NONROOT=65532

# stage_common DIR BINARY: the files every image has.
stage_common() {
	local dir=$1 b=$2
	rm -rf "$dir"
	mkdir -p "$dir/rootfs/etc" "$dir/state"
	install -m 0755 "$BIN/$b" "$dir/rootfs/entrypoint"
	printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/nonexistent:/sbin/nologin\n' \
		"$NONROOT" "$NONROOT" >"$dir/rootfs/etc/passwd"
	printf 'root:x:0:\nnonroot:x:%d:\n' "$NONROOT" >"$dir/rootfs/etc/group"
	if [ -f "$CA_CERTS" ]; then
		install -D -m 0644 "$CA_CERTS" "$dir/rootfs/etc/ssl/certs/ca-certificates.crt"
	fi
}

# stage_busybox ROOTFS: /bin/busybox and a relative link per applet. Scratch
# has no shell to RUN `busybox --install`, so the links are made here.
stage_busybox() {
	local root=$1 applet
	mkdir -p "$root/bin"
	install -m 0755 "$BUSYBOX" "$root/bin/busybox"
	for applet in $("$BUSYBOX" --list); do
		[ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
	done
	mkdir -m 1777 "$root/tmp"
}

if [ ! -f "$CA_CERTS" ]; then
	echo "note: $CA_CERTS not found: images get no CA certificates (https checks will fail); apt-get install ca-certificates" >&2
fi

images=()
for b in $BINARIES; do
	dir=$BIN/images/$b
	image=$IMAGE_PREFIX/$b:$IMAGE_TAG
	state_dir=/var/lib/$b
	stage_common "$dir" "$b"
	case $b in
	sluice-agent) stage_busybox "$dir/rootfs" ;;
	nats-server)
		install -m 0755 "$BIN/probe" "$dir/rootfs/probe"
		state_dir=/data # deploy/nats-*.conf: store_dir
		;;
	esac
	# Quiet unless it fails (the legacy builder warns that it is legacy on
	# every build; BuildKit is not installed here).
	if ! out=$(docker build --pull=false -q -f "$DOCKERFILE" \
		--build-arg "BIN=$b" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
		--build-arg "STATE_DIR=$state_dir" -t "$image" "$dir" 2>&1); then
		echo "$out" >&2
		echo "docker build of $image failed" >&2
		exit 1
	fi
	images+=("$image")
done

# The agent's checks need a working shell as the non-root user.
agent=$IMAGE_PREFIX/sluice-agent:$IMAGE_TAG
if [[ " $BINARIES " == *" sluice-agent "* ]]; then
	got=$(docker run --rm --network none --entrypoint /bin/sh "$agent" -c 'echo "$(id -u):$(id -g)"; test -w /var/lib/sluice-agent && test -w /tmp && echo writable')
	if [ "$got" != "$NONROOT:$NONROOT"$'\n'"writable" ]; then
		echo "$agent: /bin/sh as $NONROOT with a writable state dir and /tmp: got $got" >&2
		exit 1
	fi
fi

printf '%-42s %-18s %8s\n' IMAGE VERSION SIZE
for image in "${images[@]}"; do
	docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}} {{.Size}}' "$image" |
		awk -v img="$image" '{ printf "%-42s %-18s %6.1fMB\n", img, $1, $2 / 1e6 }'
done
