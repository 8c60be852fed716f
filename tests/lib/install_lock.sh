# Sourced by the scripts that install what they need (tests/nginx, tests/ui, tests/node,
# deploy/validate.sh): one machine-wide lock around every install, so that .ci/run can start
# them all in the background at its start (`--install-only`) while each script, run later or
# standalone on a fresh machine, waits for a running install and then finds it done.
#
# Usage: install_lock; …install…; install_unlock
# The lock is ${DEVSHARD_INSTALL_LOCK:-${TMPDIR:-/tmp}/devshard-install.lock} (flock(1); without
# flock the installs just run, as before).

install_lock() {
    command -v flock >/dev/null 2>&1 || return 0
    exec 9>"${DEVSHARD_INSTALL_LOCK:-${TMPDIR:-/tmp}/devshard-install.lock}"
    if ! flock -n 9; then
        echo "== waiting for another install (the CI's background installs) to finish"
        flock 9
    fi
}

install_unlock() {
    command -v flock >/dev/null 2>&1 || return 0
    flock -u 9
    exec 9>&-
}
