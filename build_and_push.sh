#!/usr/bin/env bash
# Build the custom-kube-scheduler-webhook image for linux/amd64 and linux/arm64 and push it
# to Amazon ECR. Run ./build_and_push.sh --help for the options.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: ./build_and_push.sh [options]

Builds the multi-arch image with docker buildx and pushes it to
<account>.dkr.ecr.<region>.amazonaws.com/<repository>, creating the ECR repository
(scan on push, immutable tags by default) when it does not exist.

Tags: the git commit (12 hex digits, "-dirty" when the tree has local changes) and,
with --version, that version too.

Options:
  --version V        also tag the image V (e.g. 0.2.0)
  --repository NAME  ECR repository (default: $ECR_REPOSITORY or custom-kube-scheduler-webhook)
  --region R         AWS region (default: $AWS_REGION, $AWS_DEFAULT_REGION, `aws configure get region`)
  --account ID       AWS account (default: $AWS_ACCOUNT_ID, else `aws sts get-caller-identity`)
  --platforms LIST   buildx platforms (default: linux/amd64,linux/arm64)
  --mutable-tags     create the repository with MUTABLE tags (default IMMUTABLE)
  --dry-run          print every command instead of running it; needs neither aws nor docker
  -h, --help         this help

Environment: AWS_PROFILE and the usual AWS CLI variables apply. BUILDX_BUILDER names the
buildx builder (default: custom-kube-scheduler-webhook, created with the
docker-container driver when missing).
USAGE
}

die() {
	echo "build_and_push.sh: $*" >&2
	exit 1
}

repository=${ECR_REPOSITORY:-custom-kube-scheduler-webhook}
region=${AWS_REGION:-${AWS_DEFAULT_REGION:-}}
account=${AWS_ACCOUNT_ID:-}
platforms=linux/amd64,linux/arm64
version=""
mutability=IMMUTABLE
dry_run=false
builder=${BUILDX_BUILDER:-custom-kube-scheduler-webhook}

while (($# > 0)); do
	case "$1" in
	--version)
		version=${2:?--version needs a value}
		shift 2
		;;
	--repository)
		repository=${2:?--repository needs a value}
		shift 2
		;;
	--region)
		region=${2:?--region needs a value}
		shift 2
		;;
	--account)
		account=${2:?--account needs a value}
		shift 2
		;;
	--platforms)
		platforms=${2:?--platforms needs a value}
		shift 2
		;;
	--mutable-tags)
		mutability=MUTABLE
		shift
		;;
	--dry-run)
		dry_run=true
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		usage >&2
		die "unknown argument: $1"
		;;
	esac
done

# Docker tags: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
if [[ -n $version && ! $version =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
	die "--version $version is not a valid image tag"
fi

# quote prints one word so a shell reads it back unchanged.
quote() {
	if [[ $1 =~ ^[A-Za-z0-9_./:=,@+%-]+$ ]]; then
		printf '%s' "$1"
	else
		printf "'%s'" "${1//\'/\'\\\'\'}"
	fi
}

# show prints a command, one line, prefixed with "+".
show() {
	local out="+" arg
	for arg in "$@"; do out+=" $(quote "$arg")"; done
	echo "$out"
}

# run runs a command, or only shows it with --dry-run.
run() {
	show "$@"
	if ! $dry_run; then "$@"; fi
}

cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ -z $account ]]; then
	if $dry_run; then
		show aws sts get-caller-identity --query Account --output text
		account='<account-id>'
	else
		command -v aws >/dev/null 2>&1 || die "aws CLI not found (or set AWS_ACCOUNT_ID and log in to ECR yourself)"
		account=$(aws sts get-caller-identity --query Account --output text)
	fi
fi
if [[ -z $region ]]; then
	if $dry_run; then
		show aws configure get region
		region='<region>'
	else
		region=$(aws configure get region || true)
	fi
fi
[[ -n $region ]] || die "no AWS region: pass --region or set AWS_REGION"
if ! $dry_run; then
	command -v docker >/dev/null 2>&1 || die "docker not found"
	docker buildx version >/dev/null 2>&1 || die "docker buildx not available"
fi

revision=$(git rev-parse HEAD 2>/dev/null) || die "not a git checkout: the image is tagged with the commit"
sha_tag=${revision:0:12}
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	sha_tag+=-dirty
fi

registry=$account.dkr.ecr.$region.amazonaws.com
image=$registry/$repository
tags=(--tag "$image:$sha_tag")
if [[ -n $version ]]; then tags+=(--tag "$image:$version"); fi

# 1. Repository, created on first use.
show aws ecr describe-repositories --repository-names "$repository" --region "$region"
if $dry_run || ! aws ecr describe-repositories --repository-names "$repository" --region "$region" >/dev/null 2>&1; then
	run aws ecr create-repository --repository-name "$repository" --region "$region" \
		--image-scanning-configuration scanOnPush=true \
		--image-tag-mutability "$mutability" \
		--encryption-configuration encryptionType=AES256
fi

# 2. Registry login (the password goes through a pipe, never the command line).
echo "+ aws ecr get-login-password --region $(quote "$region") | docker login --username AWS --password-stdin $(quote "$registry")"
if ! $dry_run; then
	aws ecr get-login-password --region "$region" | docker login --username AWS --password-stdin "$registry"
fi

# 3. A buildx builder that can build and push a multi-platform image.
show docker buildx inspect "$builder"
if $dry_run || ! docker buildx inspect "$builder" >/dev/null 2>&1; then
	run docker buildx create --name "$builder" --driver docker-container --bootstrap
fi

# 4. Build for every platform and push one multi-arch manifest list.
run docker buildx build --builder "$builder" \
	--platform "$platforms" \
	--build-arg "VERSION=${version:-$sha_tag}" \
	--build-arg "REVISION=$revision" \
	"${tags[@]}" \
	--provenance=true --sbom=true \
	--push .

echo
echo "Pushed $image:$sha_tag${version:+ and $image:$version}"
echo "Install or upgrade with:"
echo "  helm upgrade --install custom-kube-scheduler-webhook deploy/chart/custom-kube-scheduler-webhook \\"
echo "    --namespace custom-kube-scheduler-webhook --create-namespace \\"
echo "    --set image.repository=$image --set image.tag=${version:-$sha_tag}"
