#!/bin/sh
# Run as root inside the image's root filesystem, after its packages are installed: by
# scripts/image (an mmdebstrap customize hook, through chroot) and by the Dockerfile (RUN),
# so that both images get the same user, directories and trimmed files.
#
# The user and group are deploy/systemd/ballast.sysusers.conf's `ballast`, with the fixed
# UID and GID 10001 that the Kubernetes manifests run as (runAsUser, runAsGroup, fsGroup,
# and the group training pods join to reach the agent's socket).
set -eu

groupadd --gid 10001 ballast
useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/ballast \
  --shell /usr/sbin/nologin --comment "Ballast straggler control" ballast

# The paths the daemons' flags point at (the coordinator's store, the agent's socket, the
# flagfiles and certificates). On Kubernetes volumes are mounted over them; with a plain
# `docker run` they are already there, owned as the systemd units would make them.
install -d -m 0750 -o ballast -g ballast /var/lib/ballast /run/ballast
install -d -m 0750 -o root -g ballast /etc/ballast

# dpkg's path filters (dpkg-slim.cfg here, /etc/dpkg/dpkg.cfg.d/docker in debian:12-slim)
# only apply to what dpkg itself unpacks: mmdebstrap unpacks the essential packages before
# dpkg reads them, so apply them again to the files already on disk. As dpkg does, a
# pattern's `*` also matches `/`, and a path-include wins over a path-exclude. dpkg reads
# both `option value` and `option=value`.
excludes="" includes=""
for cfg in /etc/dpkg/dpkg.cfg.d/*; do
  [ -f "$cfg" ] || continue
  while read -r line; do
    case $line in
      path-exclude[=\ \	]*) excludes="$excludes ${line#path-exclude?}" ;;
      path-include[=\ \	]*) includes="$includes ${line#path-include?}" ;;
    esac
  done <"$cfg"
done
set -f  # the patterns are for find, not for the shell
for pattern in $excludes; do
  keep=""
  for inc in $includes; do keep="$keep ! -path $inc"; done
  top=${pattern%%[*?[]*}  # the directory above the pattern's first wildcard
  top=${top%/*}
  [ -d "$top" ] || continue
  # shellcheck disable=SC2086  # one word per find argument, on purpose
  find "$top" -path "$pattern" ! -type d $keep -delete
  find "$top" -depth -mindepth 1 -path "$pattern" -type d -empty -delete
done
set +f

# Nothing in the image is ever installed at run time: drop what apt keeps for that, the
# downloaded packages included (debian:12-slim's apt hook deletes them, mmdebstrap's
# cleanup too, but the image should not depend on either).
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/log/*.log \
  /var/log/apt/*
