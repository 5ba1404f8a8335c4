#!/usr/bin/env bash
# Builds sluice/prometheus:$IMAGE_TAG FROM scratch from Debian's prometheus
# package (the one make test installs for promtool), for docker-compose's
# profile "prometheus": nothing is pulled, as for every other image here.
#
# Debian's /usr/bin/prometheus is not static: it links libc (file says
# "dynamically linked"; ldd lists libc.so.6 and the loader). So the image
# carries the two files ldd names, at their paths, beside the binary, and
# Debian's web assets (/usr/share/prometheus/web, which --web.local-assets
# points at). deploy/Dockerfile builds it like the others: /entrypoint, user
# 65532, its state (the TSDB) in /var/lib/prometheus.
set -euo pipefail

IMAGE_PREFIX=${IMAGE_PREFIX:-sluice}
IMAGE_TAG=${IMAGE_TAG:-dev}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
WEB=${WEB:-/usr/share/prometheus/web}
STAGE=${STAGE:-bin/images/prometheus}
here=$(cd "$(dirname "$0")" && pwd)
NONROOT=65532

if [ ! -x "$PROMETHEUS" ]; then
	echo "no $PROMETHEUS: make promtool installs Debian's prometheus (or set PROMETHEUS=…)" >&2
	exit 1
fi
rm -rf "$STAGE"
mkdir -p "$STAGE/rootfs/etc" "$STAGE/state"
install -m 0755 "$PROMETHEUS" "$STAGE/rootfs/entrypoint"
# The shared objects the binary needs, at the paths the loader looks in.
for lib in $(ldd "$PROMETHEUS" | grep -o '/[^ ]*'); do
	install -D -m 0755 "$(readlink -f "$lib")" "$STAGE/rootfs$lib"
done
if [ -d "$WEB" ]; then
	# Debian links the JavaScript libraries in from /usr/share/javascript;
	# moment-timezone's raw data (212 MB) is not what the page loads (it
	# loads moment-timezone-with-data.min.js).
	mkdir -p "$STAGE/rootfs$(dirname "$WEB")"
	cp -rL "$WEB" "$STAGE/rootfs$WEB"
	rm -rf "$STAGE/rootfs$WEB/static/moment-timezone/data"
fi
printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/nonexistent:/sbin/nologin\n' "$NONROOT" "$NONROOT" >"$STAGE/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:%d:\n' "$NONROOT" >"$STAGE/rootfs/etc/group"
version=$("$PROMETHEUS" --version 2>&1 | awk 'NR==1 {print $3}')
image=$IMAGE_PREFIX/prometheus:$IMAGE_TAG
if ! out=$(docker build --pull=false -q -f "$here/../Dockerfile" --build-arg BIN=prometheus --build-arg "VERSION=$version" \
	--build-arg STATE_DIR=/var/lib/prometheus -t "$image" "$STAGE" 2>&1); then
	echo "$out" >&2
	echo "docker build of $image failed" >&2
	exit 1
fi
# It must start as the image's user: the loader, libc and the binary run.
docker run --rm --network none "$image" --version >/dev/null
docker image inspect -f '{{.Size}}' "$image" | awk -v img="$image" -v v="$version" '{ printf "%-42s %-18s %6.1fMB\n", img, v, $1 / 1e6 }'
