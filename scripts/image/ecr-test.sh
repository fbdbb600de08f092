#!/usr/bin/env bash
# Test build_and_push.sh's ECR path for real, with no AWS account: the AWS CLI of Debian
# (awscli, v2) speaks ECR's JSON protocol, SigV4-signed, to scripts/image/ecrlocal on
# loopback; the authorization token it hands out names a local registry (Debian's
# docker-registry over HTTPS with a throwaway CA, htpasswd user AWS with the token's
# password) as its proxyEndpoint. Nothing is pointed at the registry by hand: the script
# takes the host from the token, as it does against ECR.
#   - a missing CLI, no credentials, a malformed and a wrong region: clear errors, nothing built;
#   - first run: the repository created IMMUTABLE, scan on push, AES256, in the account
#     given; the login is the token's (user AWS, its password); the push went to the
#     token's host; the multi-arch image (linux/amd64, linux/arm64) is there (skopeo);
#   - the registry refuses an anonymous push and a wrong password;
#   - second run: the repository is not created again, the existing tag is refused
#     before building, nothing pushed;
#   - the script called DescribeRepositories, CreateRepository, BatchGetImage and
#     GetAuthorizationToken and nothing else (ecrlocal's call log).
# Everything lives in one temporary directory (ecrlocal, registry, certificate, logins),
# removed at the end; the two servers are stopped by PID.
#
#   scripts/image/ecr-test.sh       (make test-ecr; make test-image runs it too)
# Env: ECR_TEST_BASES="BUILDER_REF RUNTIME_REF": stand-in bases already in the image store
# of CONTAINERS_STORAGE_CONF (scripts/image/test.sh passes its own, with its build cache
# in TMPDIR); without it, an image store of the test's own and the bases built there.
# ECR_TEST_VERSION (default: VERSION with a "-ecr-test" suffix), IMAGE_TEST_KEEP=1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/image/lib.sh
source "$here/lib.sh"
# shellcheck source=deploy/test/testlib.sh
source "$repo/deploy/test/testlib.sh"
cd "$repo"

img_help "${BASH_SOURCE[0]}" "${1:-}"
img_ensure_tools
# Debian's CLI, not whatever `aws` comes first on PATH (a pip or pyenv one).
lc_ensure_packages /usr/bin/aws:awscli openssl:openssl >&2
aws_version=$(/usr/bin/aws --version 2>&1)
[[ $aws_version == aws-cli/2.* ]] || lc_die "/usr/bin/aws is not the AWS CLI v2: $aws_version"
version=${ECR_TEST_VERSION:-$(<VERSION)-ecr-test}
account=123456789012
region=us-east-1
start=$(date +%s)

work=$(mktemp -d "${TMPDIR:-/tmp}/cksw-ecr-test.XXXXXX")
own_store=false
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	PIDS=$work/pids LOGS=$work/logs lc_stop ecrlocal >&2 || true
	img_registry_stop "$work/registry" || true
	if $own_store; then buildah rm --all >/dev/null 2>&1 || true; fi
	if [[ ${IMAGE_TEST_KEEP:-0} == 1 ]]; then
		img_log "kept $work"
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${ECR_TEST_BASES:-} ]]; then
	read -r builder_image runtime_image <<<"$ECR_TEST_BASES"
else
	own_store=true
	img_private_store "$work"
	img_share_go_caches "$TMPDIR"
	echo "== make image-bases (an image store of the test's own)"
	bases=$(bash "$here/bases.sh")
	builder_image=$(sed -n 's/^BUILDER_IMAGE=//p' <<<"$bases")
	runtime_image=$(sed -n 's/^RUNTIME_IMAGE=//p' <<<"$bases")
fi
[[ -n $builder_image && -n $runtime_image ]] || lc_die "no stand-in bases (ECR_TEST_BASES=\"BUILDER_REF RUNTIME_REF\")"

# aws first on PATH is Debian's; ecrlocal next to it.
mkdir -p "$work/bin" "$work/aws"
ln -s /usr/bin/aws "$work/bin/aws"
go build -o "$work/bin/ecrlocal" ./scripts/image/ecrlocal
export PATH=$work/bin:$PATH

# A throwaway CA-less self-signed certificate for 127.0.0.1, trusted through SSL_CERT_FILE
# by the Go programs that talk to the registry (buildah, skopeo, ecrlocal's reads).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$work/registry.key" -out "$work/registry.crt" 2>/dev/null
export SSL_CERT_FILE=$work/registry.crt
# Logins go to a file of the test's own, not the machine's auth.json.
export REGISTRY_AUTH_FILE=$work/auth.json

# The registry password ECR's token carries, and the registry that wants it.
password=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
printf '%s' "$password" >"$work/password"
printf '%s\n' "$password" | htpasswd -iBc "$work/htpasswd" AWS 2>/dev/null
IMG_REGISTRY_LOG_LEVEL=info img_registry_start "$work/registry" "$work/htpasswd" "$work/registry.crt" "$work/registry.key"

# Credentials ecrlocal accepts; no config file, no instance metadata: nothing leaves loopback.
key_id=AKIDECRLOCAL$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)
head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$work/secret"
PIDS=$work/pids LOGS=$work/logs lc_start ecrlocal "$work/bin/ecrlocal" -listen 127.0.0.1:0 -addr-file "$work/ecr.addr" \
	-region "$region" -account "$account" -access-key-id "$key_id" -secret-access-key-file "$work/secret" \
	-registry "$REGISTRY_URL" -registry-ca "$work/registry.crt" -password-file "$work/password" \
	-calls "$work/calls.jsonl" -state "$work/state.json"
LC_WAIT_SECONDS=30 lc_wait test -s "$work/ecr.addr" || lc_die "ecrlocal did not start: $(tail -n 5 "$work/logs/ecrlocal.log")"
endpoint=http://$(<"$work/ecr.addr")
img_log "ecrlocal on $endpoint (pid $(<"$work/pids/ecrlocal.pid")), $aws_version"

aws_env=(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_PROFILE -u AWS_DEFAULT_PROFILE -u AWS_SESSION_TOKEN -u AWS_REGION -u AWS_DEFAULT_REGION
	-u AWS_ACCOUNT_ID -u AWS_ROLE_ARN -u AWS_WEB_IDENTITY_TOKEN_FILE -u AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
	-u AWS_CONTAINER_CREDENTIALS_FULL_URI -u AWS_ENDPOINT_URL -u ECR_REPOSITORY
	AWS_CONFIG_FILE="$work/aws/config" AWS_SHARED_CREDENTIALS_FILE="$work/aws/credentials"
	AWS_EC2_METADATA_DISABLED=true AWS_PAGER= AWS_ENDPOINT_URL_ECR="$endpoint")
creds=(AWS_ACCESS_KEY_ID="$key_id" AWS_SECRET_ACCESS_KEY="$(<"$work/secret")")
build=(--engine buildah --builder-image "$builder_image" --runtime-image "$runtime_image")

# calls_since N: the operations ecrlocal logged after its first N calls, one a line.
calls_since() { tail -n "+$(($1 + 1))" "$work/calls.jsonl" | jq -r '.op + (if .error then " " + .error else "" end)'; }
ncalls() { if [[ -f $work/calls.jsonl ]]; then wc -l <"$work/calls.jsonl"; else echo 0; fi; }

# refused DESCRIPTION MESSAGE-REGEX [ENV...] -- ARGS...: build_and_push.sh exits 1 with the
# message, before anything is built.
refused() {
	local what=$1 msg=$2 envs=() rc=0 out
	shift 2
	while [[ $1 != -- ]]; do
		envs+=("$1")
		shift
	done
	shift
	out=$("${aws_env[@]}" "${envs[@]}" "$BASH" ./build_and_push.sh "$@" 2>&1) || rc=$?
	check "$what: exit status 1 ($rc)" test "$rc" -eq 1
	check "$what: says so" matches "$out" "$msg"
	check_not "$what: nothing built" matches "$out" '^\+ (buildah build|git ls-files)'
	if ! matches "$out" "$msg"; then awk '{print "     | " $0}' <<<"$out" >&2; fi
}

echo "== refused before anything is built"
n=$(ncalls)
mkdir -p "$work/noaws"
ln -s "$(command -v dirname)" "$work/noaws/dirname"
refused "no aws CLI" '^build_and_push\.sh: aws CLI not found' "${creds[@]}" PATH="$work/noaws" -- \
	--account "$account" --region "$region" --version "$version" "${build[@]}"
refused "no credentials" '^build_and_push\.sh: aws ecr describe-repositories failed: no usable AWS credentials' -- \
	--account "$account" --region "$region" --version "$version" "${build[@]}"
check "no credentials: the CLI sent nothing" test "$(ncalls)" -eq "$n"
refused "a malformed region" '^build_and_push\.sh: --region us-east is not an AWS region name' "${creds[@]}" -- \
	--account "$account" --region us-east --version "$version" "${build[@]}"
check "a malformed region: the CLI sent nothing" test "$(ncalls)" -eq "$n"
refused "a wrong region" "^build_and_push\.sh: aws ecr describe-repositories failed: is --region us-west-2 right\?" "${creds[@]}" -- \
	--account "$account" --region us-west-2 --version "$version" "${build[@]}"
check "a wrong region: ECR refused the region's signature" test "$(calls_since "$n")" = "DescribeRepositories InvalidSignatureException"
check "nothing created by the refused runs" test "$(jq '.repositories | length' "$work/state.json")" -eq 0

echo "== build_and_push.sh --account $account --region $region --version $version (ECR endpoint $endpoint)"
n=$(ncalls)
run_start=$(date +%s)
if ! "${aws_env[@]}" "${creds[@]}" ./build_and_push.sh --account "$account" --region "$region" --version "$version" \
	"${build[@]}" >"$work/push.log" 2>&1; then
	cat "$work/push.log" >&2
	lc_die "build_and_push.sh (ECR) failed (its output is above)"
fi
run_s=$(($(date +%s) - run_start))
grep -E '^( +registry|Pushed|Image digest)' "$work/push.log" || true
image=$REGISTRY/custom-kube-scheduler-webhook
check "ECR calls: DescribeRepositories (not found), CreateRepository, BatchGetImage, GetAuthorizationToken" \
	test "$(calls_since "$n" | paste -sd,)" = "DescribeRepositories RepositoryNotFoundException,CreateRepository,BatchGetImage,GetAuthorizationToken"
repo_json=$(jq -c '.repositories[] | select(.repositoryName == "custom-kube-scheduler-webhook")' "$work/state.json")
check "repository created with IMMUTABLE tags" test "$(jq -r .imageTagMutability <<<"$repo_json")" = IMMUTABLE
check "repository created with scan on push" test "$(jq -r .imageScanningConfiguration.scanOnPush <<<"$repo_json")" = true
check "repository created with AES256 encryption" test "$(jq -r .encryptionConfiguration.encryptionType <<<"$repo_json")" = AES256
check "repository created in account $account" test "$(jq -r 'select(.op == "CreateRepository") | .request.registryId' "$work/calls.jsonl")" = "$account"
check "the registry host is the token's proxyEndpoint ($REGISTRY)" contains "$(cat "$work/push.log")" "   registry $REGISTRY (the token's proxyEndpoint)"
check "pushed to the token's host" matches "$(cat "$work/push.log")" "^Pushed $image:[0-9a-f]{12}(-dirty)? and $image:$version$"
want_auth=$(printf 'AWS:%s' "$password" | base64 -w0)
check "logged in as AWS with the token's password" test "$(jq -r --arg r "$REGISTRY" '.auths[$r].auth' "$work/auth.json")" = "$want_auth"
# shellcheck disable=SC2016 # awk's own $0
check "the token's registry took the manifest ($version, 201)" awk -v uri="http.request.uri=/v2/custom-kube-scheduler-webhook/manifests/$version" \
	'/msg="response completed"/ && /http.request.method=PUT/ && index($0, uri " ") && /http.response.status=201/ { found = 1 } END { exit !found }' \
	"$work/registry/logs/registry.log"

echo "== what is in the registry (skopeo, with the login the script made)"
sk=(skopeo --override-os linux)
raw=$("${sk[@]}" inspect --raw "docker://$image:$version")
check "a manifest list (OCI index)" matches "$(jq -r .mediaType <<<"$raw")" 'manifest\.list|image\.index'
check "linux/amd64 and linux/arm64" test "$(jq -r '[.manifests[].platform | .os + "/" + .architecture] | sort | join(",")' <<<"$raw")" = linux/amd64,linux/arm64
for arch in amd64 arm64; do
	cfg=$("${sk[@]}" inspect --override-arch "$arch" --config "docker://$image:$version")
	check "$arch: the image of version $version" test "$(jq -r '.architecture + " " + .config.Labels["org.opencontainers.image.version"]' <<<"$cfg")" = "$arch $version"
done
digest=$("${sk[@]}" inspect --format '{{.Digest}}' "docker://$image:$version")
check "the digest printed is the list's" contains "$(cat "$work/push.log")" "Image digest: $digest"
check_not "anonymous pull refused" "${sk[@]}" inspect --no-creds --raw "docker://$image:$version"
if "${sk[@]}" copy -q --dest-no-creds "docker://$image:$version" "docker://$REGISTRY/anonymous:1" >"$work/anon.log" 2>&1; then
	fail "anonymous push refused"
else
	check "anonymous push refused (authentication required)" grep -qiE 'authentication required|unauthorized' "$work/anon.log"
fi
check_not "a wrong password refused" "${sk[@]}" inspect --creds AWS:wrong --raw "docker://$image:$version"

echo "== the same version again: immutable tags"
n=$(ncalls)
rc=0
"${aws_env[@]}" "${creds[@]}" ./build_and_push.sh --account "$account" --region "$region" --version "$version" \
	"${build[@]}" >"$work/again.log" 2>&1 || rc=$?
again=$(cat "$work/again.log")
check "refused: exit status 1 ($rc)" test "$rc" -eq 1
check "says the tag exists and tags are immutable" matches "$again" "^build_and_push\.sh: custom-kube-scheduler-webhook already has the tag\(s\) .*$version.* and its tags are immutable \(IMMUTABLE\): nothing built or pushed"
check "the repository is not created again" test "$(calls_since "$n" | paste -sd,)" = "DescribeRepositories,BatchGetImage"
check_not "nothing built" matches "$again" '^\+ buildah build'
check "the image is unchanged" test "$("${sk[@]}" inspect --format '{{.Digest}}' "docker://$image:$version")" = "$digest"
if ((rc != 1)); then sed 's/^/     | /' "$work/again.log" >&2; fi

echo "== the ECR API calls, all runs"
allowed='^(DescribeRepositories|CreateRepository|BatchGetImage|GetAuthorizationToken)$'
ops=$(jq -r .op "$work/calls.jsonl" | sort | uniq -c | awk '{print $2 "x" $1}' | paste -sd' ')
echo "     $ops"
check "only DescribeRepositories, CreateRepository, BatchGetImage, GetAuthorizationToken" \
	test -z "$(jq -r .op "$work/calls.jsonl" | grep -vE "$allowed" || true)"
check "no call refused as unknown" test -z "$(jq -r 'select(.error == "UnknownOperationException") | .op' "$work/calls.jsonl")"

echo "ECR build and push ${run_s}s, total $(($(date +%s) - start))s"
finish
