#!/usr/bin/env bash
# A local stand-in for the AWS price APIs, for `spread --cost` and `plan --cost` on the
# local cluster: scripts/localcluster/awslocal serves prices.txt (the kwok instance
# types' prices) over the Price List API (JSON 1.1) and EC2's DescribeSpotPriceHistory
# (EC2 query protocol), on loopback.
#   aws-prices.sh start   build awslocal, start it (PID in pids/awslocal.pid, log
#                         logs/awslocal.log) and write aws.env: the AWS SDK settings that
#                         point at it (source it, then run the CLI with --cost)
#   aws-prices.sh stop    stop it by its recorded PID (down.sh does too)
# Env: AWS_PRICES_PORT (default 9600 + port offset), AWS_PRICES_FILE (default
# scripts/localcluster/prices.txt).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

AWS_PRICES_PORT=${AWS_PRICES_PORT:-$((9600 + LOCALCLUSTER_PORT_OFFSET))}
AWS_PRICES_FILE=${AWS_PRICES_FILE:-$LC_SCRIPTS/prices.txt}
bin=$LOCALCLUSTER_DIR/awslocal

case ${1:-} in
start)
	if lc_pid_alive awslocal; then
		lc_log "awslocal already running (pid $(<"$PIDS/awslocal.pid"))"
		exit 0
	fi
	(cd "$REPO_ROOT" && go build -o "$bin" ./scripts/localcluster/awslocal)
	lc_start awslocal "$bin" -listen "127.0.0.1:$AWS_PRICES_PORT" -prices "$AWS_PRICES_FILE"
	if ! LC_WAIT_SECONDS=20 lc_wait grep -q 'prices on http' "$LOGS/awslocal.log"; then
		cat "$LOGS/awslocal.log" >&2 || true
		lc_die "awslocal did not start; see $LOGS/awslocal.log"
	fi
	cat >"$LOCALCLUSTER_DIR/aws.env" <<ENV
# AWS SDK settings for the local price endpoint (scripts/localcluster/aws-prices.sh).
export AWS_ENDPOINT_URL=http://127.0.0.1:$AWS_PRICES_PORT
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
ENV
	lc_log "$(head -n 1 "$LOGS/awslocal.log") (pid $(<"$PIDS/awslocal.pid")); source $LOCALCLUSTER_DIR/aws.env to use it"
	;;
stop)
	lc_stop awslocal
	;;
*)
	echo "usage: $0 start|stop" >&2
	exit 2
	;;
esac
