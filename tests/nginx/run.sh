#!/usr/bin/env bash
# The chain poller against a real nginx configured like the public proxy's api_zone
# (tests/nginx/api_zone.conf, scaled as documented in tests/chain_poll/nginx.rs).
# Installs nginx from Debian packages when it is missing (needs root; works on a fresh machine),
# then runs the #[ignore]d nginx tests. Takes about half a minute after the build.
# `--install-only`: install nginx and stop (what .ci/run starts in the background).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install_lock.sh

install_lock
if [ -n "${NGINX_BIN:-}" ]; then
    :
elif [ -x /usr/sbin/nginx ]; then
    export NGINX_BIN=/usr/sbin/nginx
elif command -v nginx >/dev/null 2>&1; then
    NGINX_BIN="$(command -v nginx)"
    export NGINX_BIN
else
    echo "== installing nginx (Debian packages)"
    # Keep the package from starting a system-wide nginx on port 80.
    policy_created=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        policy_created=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx-light \
        || apt-get install -y -qq --no-install-recommends nginx
    if [ "$policy_created" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
    export NGINX_BIN=/usr/sbin/nginx
fi
install_unlock
"$NGINX_BIN" -v
[ "${1:-}" = --install-only ] && exit 0

echo "== chain poller through nginx"
cargo test --locked --test chain_poll nginx -- --ignored --nocapture
