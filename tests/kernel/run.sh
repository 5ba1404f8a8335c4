#!/usr/bin/env bash
# make test-kernel: the tests that need a kernel with VRFs (CONFIG_NET_VRF,
# which this machine kind's kernel lacks), in Debian's kernel under qemu.
# Installs qemu, the kernel and a static busybox when missing (Debian
# packages, no recommends), builds each test package as a static binary
# and boots them in one VM with the host's /usr and /etc shared read-only,
# for the FRR tests (tests/cmd/sluice-kernel-test; docs/agent.md, "On a
# real kernel"). Ends with "N passed, N failed"; exits non-zero on a
# failure, a skip, or a guest that never finished.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
BIN=${BIN:-$PWD/bin}

missing=()
for pkg in qemu-system-x86 linux-image-amd64 busybox-static; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing Debian's ${missing[*]} (without recommends)"
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

out="$BIN/kernel"
mkdir -p "$out"
# name, package, arguments in the guest.
tests=(
	"hostnet ./services/agent/hostnet -test.skip ^TestApplier_KernelVRFsWithoutKernelSupport_SaysWhatToDo$"
	"netcheck ./services/agent/netcheck"
	"e2e ./tests/e2e -test.run ^TestEndToEnd_NetlinkApplier"
	"frr ./services/agent/frr -test.run ^(TestAgent_KernelVRFs_|TestKernelRoutes$)"
)
args=()
for t in "${tests[@]}"; do
	read -r name pkg rest <<<"$t"
	CGO_ENABLED=0 $GO test -c -o "$out/$name.test" "$pkg"
	args+=("$name=$out/$name.test:${rest:-}")
done
$GO build -o "$BIN/sluice-kernel-test" ./tests/cmd/sluice-kernel-test
exec "$BIN/sluice-kernel-test" --console-log "$out/console.log" "$@" "${args[@]}"
