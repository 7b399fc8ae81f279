#!/usr/bin/env bash
# A Debian bookworm image with Python 3.11, made from Debian's packages alone, for hosts that
# reach Debian's and PyPI's package servers but no image registry:
#
#   sudo compose/local/base.sh [TAG]        # default tag: streamshop-base:bookworm
#
# debootstrap installs the minimal system with Debian's python3 into a scratch folder, which
# `docker import` turns into the image.  Debian's python3 refuses `pip install` outside a
# virtual environment (PEP 668), so a venv at /opt/python comes first on PATH: `python` and `pip`
# then behave as in the official Python image, which the Dockerfile's stages expect.  The host's
# own certificate authorities (/usr/local/share/ca-certificates: a TLS-inspecting proxy's, a
# company's) are trusted inside too, by the system and by pip.  Needs root, debootstrap and a
# running Docker engine.  DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
set -euo pipefail

tag=${1:-streamshop-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "base.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap and chroot): run it with sudo"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap (make docker)"
timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
  || die "no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}): start dockerd"
# A mirror that does not answer fails here, in seconds, not after debootstrap's retries.
timeout 20 python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/dists/bookworm/Release", timeout=15)' "$mirror" \
  || die "the Debian mirror $mirror does not answer (set DEBIAN_MIRROR to one that does)"

root=$(mktemp -d "${TMPDIR:-/tmp}/streamshop-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror" \
  > "$root.log" 2>&1 || { tail -20 "$root.log" >&2; rm -f "$root.log"; die "debootstrap failed"; }
rm -f "$root.log"
cat > "$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
shopt -s nullglob
cas=(/usr/local/share/ca-certificates/*.crt)
if [ ${#cas[@]} -gt 0 ]; then
  cp "${cas[@]}" "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates > /dev/null 2>&1 || die "update-ca-certificates failed"
fi
chroot "$root" python3 -m venv /opt/python
# As the official image: no apt lists or caches, no docs.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' \
  --message "Debian bookworm from debootstrap, Python 3.11 (compose/local/base.sh $(sha256sum "$here/base.sh" | cut -c1-12))" \
  - "$tag" > /dev/null
echo "$tag"
