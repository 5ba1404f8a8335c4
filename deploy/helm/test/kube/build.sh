#!/usr/bin/env bash
# build.sh builds a Kubernetes API server and etcd from the Go module proxy
# alone, once per machine, into a versioned cache directory outside the
# clone, and prints that directory. `make test-kube` calls it; a second call
# with the same versions only prints the directory.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces the staging
# modules (k8s.io/api, apimachinery, apiserver, client-go, …) with local
# paths. A small wrapper module requires it and replaces each of them with
# its published v0.Y.Z instead, with the go and godebug lines of
# kubernetes's own go.mod. etcd's server module has a main package.
# About 5 minutes and 2 GB of memory cold (docs/deploy.md, "Tests on a real
# API server").
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0} # what K8S_VERSION's go.mod requires
GO=${GO:-go}
cache=${SLUICE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/kube/$K8S_VERSION-etcd-$ETCD_VERSION}
if [ -x "$cache/kube-apiserver" ] && [ -x "$cache/etcd" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d /tmp/sluice-kube-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
export GOWORK=off GOFLAGS=-mod=mod

echo "building kube-apiserver $K8S_VERSION and etcd $ETCD_VERSION into $cache (once per machine; about 5 minutes)" >&2
mod=$(cd "$work" && $GO mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
minor=${K8S_VERSION#v1.}
staging=v0.$minor
{
	echo "module sluice.test/kube"
	grep -E '^(go|godebug) ' "$mod"
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo "replace ("
	sed -n '/^replace (/,/^)/p' "$mod" | grep '=> ./staging/' | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
	echo ")"
} >"$work/go.mod"
cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
(
	cd "$work"
	$GO mod tidy >&2
	pkg=k8s.io/component-base/version
	major=${K8S_VERSION#v}
	major=${major%%.*}
	ldflags="-X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	CGO_ENABLED=0 $GO build -trimpath -ldflags "$ldflags" -o "$cache/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2
)
(
	# etcd at the version kubernetes's go.mod requires, in the same module
	cd "$work"
	$GO get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
	CGO_ENABLED=0 $GO build -trimpath -o "$cache/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
)
mv "$cache/etcd.tmp" "$cache/etcd"
mv "$cache/kube-apiserver.tmp" "$cache/kube-apiserver"
echo "$cache"
