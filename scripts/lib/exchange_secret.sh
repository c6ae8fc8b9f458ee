# shellcheck shell=bash
# The job's secret for the ranks' meeting at rank 0 (docs/workers.md), for the ranks a script
# starts: every rank inherits $INAGG_EXCHANGE_SECRET from the script, as from any launcher.
# export_exchange_secret: a random one, unless one is set already.
export_exchange_secret() {
  if [ -z "${INAGG_EXCHANGE_SECRET:-}" ]; then
    INAGG_EXCHANGE_SECRET=$(head -c 24 /dev/urandom | base64) || return 1
  fi
  export INAGG_EXCHANGE_SECRET
}
