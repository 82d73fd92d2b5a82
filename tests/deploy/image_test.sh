#!/usr/bin/env bash
# The container image (scripts/image), built and run without a container engine:
#  1. built from this build directory's binaries; its tag is the project's version, the
#     tag every Kubernetes manifest names; its config runs as 10001:10001; under 100 MB
#     compressed;
#  2. unpacked with umoci (as a runtime would), and started in namespaces of its own (net,
#     mount, pid) from a read-only chroot of its root filesystem, with the volumes the
#     manifests mount: the agent's init container (its command from agent.yaml, as root),
#     then the coordinator and an agent, each with its manifest's command and args and the
#     image's user, PATH and HOME, on loopback;
#  3. the kubelet's probes answer (grpc.health.v1 SERVING on the coordinator's plaintext
#     health port; the agent's /metrics), `ballastctl status` run from the image sees the
#     agent, both daemons run as UID/GID 10001, the socket is the agent's, `ldd` finds
#     every library of every binary inside the image, and both stop cleanly on SIGTERM.
#
#   image_test.sh SOURCE_DIR BUILD_DIR GRPC_HEALTH_PROBE
#
# Skips (exit 77) without root or namespaces, or when the Debian mirror cannot be reached
# and no root filesystem is cached. The Debian root filesystem is cached in
# BUILD_DIR/image-cache (scripts/image's default), so a re-run takes seconds.
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
skip() { echo "SKIP: $*"; exit 77; }

# --- Inside the namespaces (the test re-executes itself there) ----------------------------
if [ "${1:-}" = --inside ]; then
  shift
  src=$1 dir=$2 bundle=$3 probe=$4
  pids=()
  source "$src/tests/testing/shell_helpers.sh"  # fail, wait_for
  trap stop_started EXIT
  ip link set lo up

  # The process the image's config describes (umoci's runtime config): user, environment.
  read -r uid gid < <("$PYTHON" -c 'import json, sys
p = json.load(open(sys.argv[1]))["process"]
print(p["user"]["uid"], p["user"]["gid"])' "$bundle/config.json")
  mapfile -t env < <("$PYTHON" -c 'import json, sys
print("\n".join(json.load(open(sys.argv[1]))["process"]["env"]))' "$bundle/config.json")
  [ "$uid:$gid" = 10001:10001 ] ||
    fail "the image runs as $uid:$gid, not 10001:10001 (the manifests' runAsUser/runAsGroup)"

  # The root filesystem read-only (readOnlyRootFilesystem), with what a runtime and the
  # pod specs put over it: /proc, a few devices, the store's volume (fsGroup 10001), the
  # agent's socket directory (a hostPath the init container hands over), /tmp, and the
  # flagfiles (ConfigMaps; deploy/config's reference files: no TLS on loopback).
  root=$dir/root
  mkdir -p "$root"
  mount --bind "$bundle/rootfs" "$root"
  mount -o remount,bind,ro "$root"
  mount -t proc proc "$root/proc"
  mount -t tmpfs -o mode=0755,size=64k tmpfs "$root/dev"
  for node in null zero random urandom; do
    touch "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
  done
  mount -t tmpfs -o mode=2770,gid=10001,size=16m tmpfs "$root/var/lib/ballast"
  mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/run/ballast"
  mount -t tmpfs -o mode=1777,size=16m tmpfs "$root/tmp"
  mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/etc/ballast"
  cp "$src/deploy/config/coordinator.flags" "$src/deploy/config/agent.flags" "$root/etc/ballast/"
  touch "$root/probe" 2>/dev/null && fail "the image's root filesystem is writable"

  # The containers' commands, from the manifests.
  manifest() {
    "$PYTHON" - "$src/deploy/kubernetes/$1" "$2" <<'PY'
import sys, yaml
path, container = sys.argv[1], sys.argv[2]
for doc in yaml.safe_load_all(open(path)):
    if not doc or doc.get("kind") not in ("StatefulSet", "DaemonSet", "Deployment"):
        continue
    spec = doc["spec"]["template"]["spec"]
    for c in spec.get("initContainers", []) + spec["containers"]:
        if c["name"] == container:
            print("\n".join(c.get("command", []) + c.get("args", [])))
            sys.exit(0)
sys.exit(f"{path}: no container {container}")
PY
  }
  mapfile -t init_cmd < <(manifest agent.yaml socket-dir)
  mapfile -t coordinator_cmd < <(manifest coordinator.yaml coordinator)
  mapfile -t agent_cmd < <(manifest agent.yaml agent)
  ((${#init_cmd[@]} && ${#coordinator_cmd[@]} && ${#agent_cmd[@]})) ||
    fail "a container's command is missing from deploy/kubernetes (above)"
  agent_cmd=("${agent_cmd[@]//\$(NODE_NAME)/node-1}")  # the kubelet's env expansion

  # exec_in_image UID:GID CMD...: becomes CMD in the image, as a container runtime starts
  # it (so that `exec_in_image ... &` leaves the daemon's own pid in $!); in_image runs it
  # in a subshell.
  exec_in_image() {
    local user=$1; shift
    exec chroot --userspec="$user" --groups="${user#*:}" "$root" /usr/bin/env -i "${env[@]}" "$@"
  }
  in_image() { (exec_in_image "$@"); }

  # Every library of every binary resolves inside the image (first: a missing one is
  # named here with its package, rather than as a daemon that exits at once).
  for bin in ballast-coordinator ballast-agent ballastctl; do
    # ldd exits non-zero when a library is missing: look at what it says first.
    libs=$(in_image "$uid:$gid" ldd "/usr/local/bin/$bin" 2>&1) || true
    grep -q "libc.so.6" <<<"$libs" || fail "ldd $bin in the image failed: $libs"
    missing=$(awk '/not found/ { print $1 }' <<<"$libs")
    for lib in $missing; do
      pkg=$(dpkg -S "*/$lib" 2>/dev/null | head -n 1 | cut -d: -f1 || true)
      echo "FAIL: $bin needs $lib, missing from the image: add ${pkg:-its Debian package} to deploy/image/packages.txt" >&2
    done
    [ -z "$missing" ] || fail "$bin: libraries missing from the image"
  done
  echo "ldd: every library of the three binaries found in the image"

  in_image 0:0 "${init_cmd[@]}" || fail "the agent's init container failed: ${init_cmd[*]}"
  [ "$(stat -c '%u:%g %a' "$root/run/ballast")" = "10001:10001 750" ] ||
    fail "the init container left /run/ballast $(stat -c '%u:%g %a' "$root/run/ballast")"

  # The coordinator: the StatefulSet's command, plus the health port on loopback (the
  # reference flagfile leaves it off; the manifests' ConfigMap sets 7071).
  exec_in_image "$uid:$gid" "${coordinator_cmd[@]}" --health_listen=127.0.0.1:7071 \
    2>"$dir/coordinator.log" &
  coordinator_pid=$!
  pids+=("$coordinator_pid")
  wait_for "the coordinator's health port to say SERVING" "$probe" 127.0.0.1:7071
  echo "coordinator health (127.0.0.1:7071): $("$probe" 127.0.0.1:7071)"

  exec_in_image "$uid:$gid" "${agent_cmd[@]}" 2>"$dir/agent.log" &
  agent_pid=$!
  pids+=("$agent_pid")
  ctl() { in_image "$uid:$gid" ballastctl --coordinator=127.0.0.1:7070 --timeout=2s "$@"; }
  wait_for "ballastctl status (run from the image) to list the agent" \
    bash -c "$(declare -f exec_in_image in_image ctl); $(declare -p root uid gid env); ctl status | grep -q 'agents 1'"
  ctl status >"$dir/status.out" || fail "ballastctl status failed"
  sed 's/^/  /' "$dir/status.out"
  # The agent's liveness and readiness probe: GET /metrics (run without pipefail: grep -q
  # may stop reading early).
  wait_for "the agent's /metrics to show its coordinator session" bash -c \
    "curl -sf http://127.0.0.1:9465/metrics | grep -q 'ballast_agent_coordinator_connected{node=\"node-1\"} 1'"

  for pid in "$coordinator_pid" "$agent_pid"; do
    ids=$(awk '/^Uid:/ { u = $2 } /^Gid:/ { g = $2 } END { print u ":" g }' "/proc/$pid/status")
    [ "$ids" = 10001:10001 ] || fail "$(tr '\0' ' ' <"/proc/$pid/cmdline") runs as $ids"
  done
  [ "$(stat -c '%u:%g %a' "$root/run/ballast/agent.sock")" = "10001:10001 660" ] ||
    fail "agent socket: $(stat -c '%u:%g %a' "$root/run/ballast/agent.sock"), want 10001:10001 660"
  [ -s "$root/var/lib/ballast/coordinator.db" ] || fail "the coordinator wrote no store"
  echo "coordinator and agent run as 10001:10001; socket 0660 10001:10001"


  kill -TERM "$agent_pid" "$coordinator_pid"
  wait "$agent_pid" || fail "the agent exited with status $? on SIGTERM"
  wait "$coordinator_pid" || fail "the coordinator exited with status $? on SIGTERM"
  pids=()
  exit 0
fi

# --- Outside: build, check, unpack, then run the part above in namespaces -----------------
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) probe=$3
[ "$(id -u)" = 0 ] || skip "needs root (mmdebstrap's root mode, chroot, namespaces)"
unshare --net --mount --pid --fork --mount-proc true 2>/dev/null ||
  skip "cannot create network, mount and pid namespaces here (unshare failed)"
# The image ships release binaries: a sanitizer build's need libasan and libubsan, which it
# leaves out on purpose (the ASan pass of .ci/run runs this suite too).
for bin in coordinator/ballast-coordinator agent/ballast-agent ctl/ballastctl; do
  needed=$(readelf -d "$build/$bin" 2>/dev/null || true)
  if grep -qE 'NEEDED.*lib(a|ub|t)san' <<<"$needed"; then
    skip "$build/$bin is a sanitizer build; the image is built from plain binaries"
  fi
done
dir=$(mktemp -d "$build/image-test.XXXXXX")
pids=()
source "$src/tests/testing/shell_helpers.sh"  # fail
trap 'rm -rf "$dir"' EXIT
for tool in mmdebstrap umoci skopeo chroot ip curl; do
  command -v "$tool" >/dev/null || fail "$tool not found: run scripts/setup"
done

started=$(date +%s)
set +e
"$src/scripts/image" --build "$build" --out "$dir/out" >"$dir/image.out" 2>"$dir/image.log"
code=$?
set -e
[ "$code" != 3 ] || skip "the Debian mirror cannot be reached: $(tail -n 1 "$dir/image.log")"
[ "$code" = 0 ] || fail "scripts/image exited with status $code"
cat "$dir/image.out"

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
archive=$dir/out/ballast-$version.oci.tar
[ -s "$archive" ] || fail "no $archive: the tag is not the version $version"
size=$(stat -c %s "$archive")
((size < 100000000)) || fail "the image is $((size / 1000000)) MB compressed (goal: under 100 MB)"
config=$(skopeo inspect --config "oci-archive:$archive:$version") || fail "skopeo cannot read $archive"
"$PYTHON" -c 'import json, sys
c = json.loads(sys.argv[1])["config"]
assert c["User"] == "10001:10001", c["User"]
assert "Entrypoint" not in c or not c["Entrypoint"], c["Entrypoint"]
assert c["Labels"]["org.opencontainers.image.version"] == sys.argv[2], c["Labels"]' \
  "$config" "$version" || fail "the image's config is not as docs/operations.md describes (above)"

# Every manifest names the image by this tag, and the Dockerfile reads the same package
# list and setup script as scripts/image.
bad=$(grep -Hn 'image:' "$src"/deploy/kubernetes/*.yaml "$src"/deploy/kubernetes/examples/*.yaml |
        grep -E 'image: *"?ballast' | grep -v "image: ballast:$version\$" || true)
[ -z "$bad" ] || fail "manifests name another image than ballast:$version: $bad"
grep -q "newTag: $version\$" "$src/deploy/kubernetes/kustomization.yaml" ||
  fail "deploy/kubernetes/kustomization.yaml's images: newTag is not $version"
for shared in packages.txt setup-rootfs.sh dpkg-slim.cfg; do
  grep -q "deploy/image/$shared" "$src/deploy/image/Dockerfile" ||
    fail "deploy/image/Dockerfile does not use deploy/image/$shared"
done

umoci unpack --image "$dir/out/oci:$version" "$dir/bundle" >"$dir/unpack.log" 2>&1 ||
  fail "umoci unpack failed: $(tail -n 5 "$dir/unpack.log")"
# --kill-child: if ctest kills this script, the namespaces' processes go with it.
unshare --net --mount --pid --fork --mount-proc --kill-child \
  bash "${BASH_SOURCE[0]}" --inside "$src" "$dir" "$dir/bundle" "$probe" ||
  fail "the image did not run as the manifests expect (above)"
echo "image test: passed in $(($(date +%s) - started)) s"
