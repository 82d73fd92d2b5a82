# shellcheck shell=bash
# Two emulated nodes joined by a rate-limited link, for integration tests. Source it; it
# defines functions and variables only, and prints nothing on success.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/shaped_link.sh"
#   if ! shaped_link_up "ballast$$" 200 2>"$dir/link.err"; then
#     echo "SKIP: $(cat "$dir/link.err")"; exit 0      # not root, no iproute2, no htb...
#   fi
#   trap 'stop_started; shaped_link_down "ballast$$"' EXIT
#   ip netns exec "ballast$$b" server --listen="$SHAPED_LINK_ADDR_B:$port" & pids+=($!)
#   ip netns exec "ballast$$a" client --connect="$SHAPED_LINK_ADDR_B:$port"
#
# shaped_link_up PREFIX RATE_MBIT [BURST]
#   Makes network namespaces ${PREFIX}a and ${PREFIX}b, joined by a veth pair
#   ($SHAPED_LINK_DEV in each, $SHAPED_LINK_ADDR_A/24 in a, $SHAPED_LINK_ADDR_B/24 in b),
#   with lo up in both. Each end's egress goes through an htb qdisc whose single (default)
#   class has rate = ceil = RATE_MBIT mbit and burst = cburst = BURST (tc's syntax; default
#   $SHAPED_LINK_BURST), so each direction is shaped independently to RATE_MBIT; both ends
#   build packets of at most 16 KB (gso_max_size: below). The link has no delay and no
#   loss (netem is not available everywhere), and reaches nothing but the other
#   namespace: no route, address or device is added outside the two namespaces.
#   Returns non-zero, with a line on stderr naming what failed, when it cannot (not root, no
#   `ip` or `tc`, no network namespaces, veth, gso_max_size or htb in the kernel, PREFIX's
#   namespaces exist already), having removed whatever it made; a test then skips.
# shaped_link_down PREFIX
#   Removes both namespaces (and with them the veth pair and qdiscs). Idempotent; never
#   fails and prints nothing. Stop the processes started in them first: a namespace lives
#   on, nameless, while a process is still in it.
#
# Burst. htb lets a class send up to `burst` bytes at line rate (a veth has no line rate:
# memory speed) after being idle, so a large burst lets short transfers through unshaped.
# tc's default is rate/HZ + MTU, HZ read from /proc/net/psched: with high-resolution timers
# (any modern kernel) that is ~1e9 and the default is ~1.6 KB, but with HZ=250 (older
# kernels, or an HZ environment variable, which tc honours) it is 100 KB at 200 mbit,
# enough to let a 100 KB transfer pass at memory speed. So the burst is set explicitly.
# 4 KB: small against a 100 KB transfer (a transfer of N bytes after an idle period takes
# (N - 4 KB)/rate, 4% short of N/rate at 100 KB) and above one MTU-sized frame. tc accepts
# any value (100 bytes too, rounded to 75b); it does not warn. Measured at 200 mbit
# (25 MB/s): a 20 MB stream gets 23.9 MB/s of payload (htb counts Ethernet/IP/TCP
# headers: 25 * 1448/1514), a 200 KB request timed by its sender to the 1-byte reply
# 24.4 MB/s; with a 100 KB burst that 200 KB took 47 MB/s.
# Packets of at most 16 KB. A veth takes TCP's GSO packets (up to 64 KB) whole, and htb
# sends a packet whenever its tokens are not negative, then charges it: after an idle
# spell the first packet passes at memory speed, a head start on every transfer (the
# average rate stays RATE_MBIT). At 64 KB, transfers timed in both ranks' logs on one
# clock (the ViT's offloads, after the link idled) read 26-27 MB/s at 394 KB and 32 MB/s
# at 197 KB, 1.5-2.4 ms short of 24 MB/s, and the learned link failed its test's 20%
# (docs/benchmarks.md, 2026-12-07 (f)). One segment a packet (gso_max_segs 1) shapes
# exactly, but the per-packet work in the kernel swamps 2 cores: the unslowed rank's
# block compute went from 0.55 to 1.2-1.3 ms a unit (median, first 10 steps). Capped at 16
# KB (11 segments): a head start of at most 20 KB with the burst, 0.8 ms at 200 mbit;
# those transfers read at most 24.9 MB/s, and that compute 0.58-0.68 ms a unit.
# Quantum. htb's default quantum is rate/r2q (2.5 MB at 200 mbit), over the kernel's
# 200000 limit above which it logs "quantum of class 10001 is big" (which tc prints); with
# one class the quantum changes nothing, so it is set to 64 KB to stay quiet.

SHAPED_LINK_ADDR_A=10.213.0.1
SHAPED_LINK_ADDR_B=10.213.0.2
SHAPED_LINK_DEV=shaped0
SHAPED_LINK_BURST=4k

# _shaped_link_run WHAT COMMAND...: runs COMMAND quietly; on failure prints
# "shaped_link: WHAT failed: <its output>" to stderr and returns non-zero.
_shaped_link_run() {
  local what=$1 out
  shift
  if ! out=$("$@" 2>&1); then
    out=$(echo "$out" | tr -s '\n\t ' ' ')
    [ ${#out} -le 300 ] || out="${out:0:300}..."
    echo "shaped_link: $what failed: $out (command: $*)" >&2
    return 1
  fi
}

shaped_link_up() {
  local prefix=${1:-} rate=${2:-} burst=${3:-$SHAPED_LINK_BURST}
  local a="${prefix}a" b="${prefix}b" ns tool
  if [ -z "$prefix" ] || [ -z "$rate" ] || [ $# -gt 3 ]; then
    echo "shaped_link: usage: shaped_link_up PREFIX RATE_MBIT [BURST]" >&2
    return 2
  fi
  case $prefix in *[!A-Za-z0-9_.-]*)
    echo "shaped_link: namespace prefix '$prefix' has characters other than A-Za-z0-9_.-" >&2
    return 2 ;;
  esac
  case $rate in '' | 0 | *[!0-9]*)
    echo "shaped_link: rate '$rate' is not a positive whole number of mbit/s" >&2
    return 2 ;;
  esac
  if [ "${EUID:-}" != 0 ]; then
    echo "shaped_link: network namespaces need root (running as uid ${EUID:-?})" >&2
    return 1
  fi
  for tool in ip tc; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "shaped_link: '$tool' not found (Debian package iproute2)" >&2
      return 1
    fi
  done
  for ns in "$a" "$b"; do
    if [ -e "/run/netns/$ns" ]; then
      echo "shaped_link: network namespace $ns exists already (left over? shaped_link_down $prefix)" >&2
      return 1
    fi
  done

  # From here on a failure removes what was made. The veth is made inside $a with its peer
  # moved straight into $b, so it never appears in the caller's namespace.
  if _shaped_link_run "making network namespace $a" ip netns add "$a" &&
     _shaped_link_run "making network namespace $b" ip netns add "$b" &&
     _shaped_link_run "making a veth pair" ip -n "$a" link add "$SHAPED_LINK_DEV" \
       gso_max_size 16384 type veth peer name "$SHAPED_LINK_DEV" netns "$b" gso_max_size 16384 &&
     _shaped_link_run "adding $SHAPED_LINK_ADDR_A/24 in $a" \
       ip -n "$a" addr add "$SHAPED_LINK_ADDR_A/24" dev "$SHAPED_LINK_DEV" &&
     _shaped_link_run "adding $SHAPED_LINK_ADDR_B/24 in $b" \
       ip -n "$b" addr add "$SHAPED_LINK_ADDR_B/24" dev "$SHAPED_LINK_DEV" &&
     _shaped_link_shape "$a" "$rate" "$burst" &&
     _shaped_link_shape "$b" "$rate" "$burst" &&
     _shaped_link_run "bringing up lo in $a" ip -n "$a" link set lo up &&
     _shaped_link_run "bringing up lo in $b" ip -n "$b" link set lo up &&
     _shaped_link_run "bringing up $SHAPED_LINK_DEV in $a" ip -n "$a" link set "$SHAPED_LINK_DEV" up &&
     _shaped_link_run "bringing up $SHAPED_LINK_DEV in $b" ip -n "$b" link set "$SHAPED_LINK_DEV" up; then
    return 0
  fi
  shaped_link_down "$prefix"
  return 1
}

# _shaped_link_shape NS RATE_MBIT BURST: htb on $SHAPED_LINK_DEV's egress in NS.
_shaped_link_shape() {
  local ns=$1 rate=$2 burst=$3
  _shaped_link_run "adding an htb qdisc in $ns (kernel without sch_htb?)" \
    tc -n "$ns" qdisc add dev "$SHAPED_LINK_DEV" root handle 1: htb default 1 &&
  _shaped_link_run "adding the htb class (${rate}mbit, burst $burst) in $ns" \
    tc -n "$ns" class add dev "$SHAPED_LINK_DEV" parent 1: classid 1:1 htb \
      rate "${rate}mbit" ceil "${rate}mbit" burst "$burst" cburst "$burst" quantum 65536
}

shaped_link_down() {
  local ns
  [ -n "${1:-}" ] || return 0
  for ns in "${1}a" "${1}b"; do
    ip netns del "$ns" >/dev/null 2>&1 || true
  done
  return 0
}
