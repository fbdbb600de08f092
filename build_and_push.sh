#!/usr/bin/env bash
# Build the custom-kube-scheduler-webhook image for linux/amd64 and linux/arm64 and push it
# to Amazon ECR (the default) or any OCI registry, and optionally the Helm chart too.
# Run ./build_and_push.sh --help for the options.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: ./build_and_push.sh [options]

Builds one multi-arch image (a manifest list for every --platforms entry) and pushes it.
By default to Amazon ECR: it creates the ECR repository (scan on push, immutable tags,
AES256 encryption) when it does not exist, refuses before building when the repository's
tags are immutable and a tag to push is already there, gets an authorization token and
pushes to the registry host the token names (its proxyEndpoint, normally
<account>.dkr.ecr.<region>.amazonaws.com). With --registry, to any OCI registry, with no
AWS call.

Tags: the git commit (12 hex digits, "-dirty" when the tree has local changes) and the
version (--version, default: the VERSION file). Labels carry the version and revision.
It builds with docker buildx when a Docker engine answers, else with buildah; either
way the build gets a context with the Go modules vendored in, so it needs no network.
At the end it prints the pushed digest.

Options:
  --registry HOST[:PORT][/PATH]  push to this OCI registry instead of ECR
  --tls-verify=false             plain HTTP / unverified TLS to --registry (local registries)
  --version V                    version tag, labels and binary version (default: VERSION file)
  --repository NAME              image repository (default: $ECR_REPOSITORY or custom-kube-scheduler-webhook)
  --region R                     AWS region (default: $AWS_REGION, $AWS_DEFAULT_REGION, `aws configure get region`)
  --account ID                   AWS account whose ECR registry to use (default: $AWS_ACCOUNT_ID, else
                                 the credentials' own account, ECR's default registry)
  --ecr-endpoint-url URL         the ECR API endpoint, passed to every `aws ecr` call as --endpoint-url
                                 (default: $AWS_ENDPOINT_URL_ECR; VPC endpoints, tests)
  --platforms LIST               platforms (default: linux/amd64,linux/arm64)
  --builder-image REF            the Dockerfile's BUILDER_IMAGE (default: its pinned golang image)
  --runtime-image REF            the Dockerfile's RUNTIME_IMAGE (default: its pinned distroless image)
  --engine docker|buildah        force one (default: docker when `docker info` works, else buildah)
  --chart                        also package the Helm chart at the same version, its default
                                 image set to the pushed one by digest (image.repository, image.tag
                                 = the version for people, image.digest = the pushed index's
                                 digest: pods run repo:version@sha256:...), and push it to
                                 oci://<registry>[/PATH]/charts
  --sign-key REF                 sign the image index and the chart with cosign and attach, signed, a
                                 CycloneDX SBOM and a SLSA provenance attestation to the image;
                                 REF is a cosign key file (its password in $COSIGN_PASSWORD) or a
                                 KMS URI (awskms://, gcpkms://, azurekms://, hashivault://)
                                 (default: $COSIGN_KEY)
  --sign-keyless                 the same, keyless: a Fulcio certificate for the CI's OIDC identity,
                                 logged in Rekor (docs/release.md)
  --no-tlog                      with --sign-key: do not upload to the Rekor transparency log
                                 (private or air-gapped registries; verify with --insecure-ignore-tlog)
  --mutable-tags                 create the ECR repository with MUTABLE tags (default IMMUTABLE)
  --dry-run                      print every command instead of running it; needs neither aws,
                                 docker nor buildah (it shows the conventional ECR host, as it
                                 asks ECR for no token)
  -h, --help                     this help

ECR calls (the IAM permissions needed, see deploy/README.md): DescribeRepositories,
CreateRepository, BatchGetImage, GetAuthorizationToken, then the registry push.

Signing needs cosign and cyclonedx-gomod: $COSIGN and $CYCLONEDX_GOMOD, else
scripts/image/tools.sh builds the pinned versions once into ~/.cache (minutes, cold).

Environment: AWS_PROFILE and the usual AWS CLI variables apply. BUILDX_BUILDER names the
buildx builder (default: custom-kube-scheduler-webhook, created with the
docker-container driver when missing). For buildah: CONTAINERS_STORAGE_CONF (its image
store) and BUILDAH_ISOLATION (default chroot).
USAGE
}

die() {
	echo "build_and_push.sh: $*" >&2
	exit 1
}

cd "$(dirname "${BASH_SOURCE[0]}")"

repository=${ECR_REPOSITORY:-custom-kube-scheduler-webhook}
region=${AWS_REGION:-${AWS_DEFAULT_REGION:-}}
account=${AWS_ACCOUNT_ID:-}
ecr_endpoint=${AWS_ENDPOINT_URL_ECR:-}
platforms=linux/amd64,linux/arm64
version=""
mutability=IMMUTABLE
dry_run=false
builder=${BUILDX_BUILDER:-custom-kube-scheduler-webhook}
registry=""
tls_verify=true
builder_image=""
runtime_image=""
engine=""
chart=false
sign_key=${COSIGN_KEY:-}
keyless=false
tlog=true

while (($# > 0)); do
	case "$1" in
	--registry)
		registry=${2:?--registry needs a value}
		shift 2
		;;
	--tls-verify=true | --tls-verify=false)
		tls_verify=${1#--tls-verify=}
		shift
		;;
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
	--ecr-endpoint-url)
		ecr_endpoint=${2:?--ecr-endpoint-url needs a value}
		shift 2
		;;
	--platforms)
		platforms=${2:?--platforms needs a value}
		shift 2
		;;
	--builder-image)
		builder_image=${2:?--builder-image needs a value}
		shift 2
		;;
	--runtime-image)
		runtime_image=${2:?--runtime-image needs a value}
		shift 2
		;;
	--engine)
		engine=${2:?--engine needs a value}
		[[ $engine == docker || $engine == buildah ]] || die "--engine must be docker or buildah"
		shift 2
		;;
	--chart)
		chart=true
		shift
		;;
	--sign-key)
		sign_key=${2:?--sign-key needs a key file or KMS URI}
		shift 2
		;;
	--sign-keyless)
		keyless=true
		shift
		;;
	--no-tlog)
		tlog=false
		shift
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

if [[ -z $version ]]; then
	[[ -s VERSION ]] || die "no --version and no VERSION file"
	version=$(<VERSION)
fi
# Docker tags: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
if [[ ! $version =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
	die "--version $version is not a valid image tag"
fi
if [[ -n $registry && ! $registry =~ ^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]+)?$ ]]; then
	die "--registry $registry is not HOST[:PORT][/PATH]"
fi

sign=false
if [[ -n $sign_key ]] && $keyless; then die "--sign-key and --sign-keyless: one or the other"; fi
if [[ -n $sign_key ]] || $keyless; then sign=true; fi
if ! $tlog && $keyless; then die "--no-tlog needs --sign-key: a keyless signature is only checkable through Rekor"; fi
if [[ -n $sign_key && ! $sign_key =~ ^[a-z0-9]+:// && ! -r $sign_key ]]; then
	die "--sign-key $sign_key: no such readable key file (or a KMS URI such as awskms:///alias/name)"
fi

# ECR: the CLI, the region and the account are checked before anything else runs.
if [[ -z $registry ]]; then
	if ! $dry_run; then
		command -v aws >/dev/null 2>&1 ||
			die "aws CLI not found: pushing to ECR needs it (https://aws.amazon.com/cli/), or use --registry for another registry"
	fi
	if [[ -z $region ]]; then
		if $dry_run; then
			echo "+ aws configure get region"
			region='<region>'
		else
			region=$(aws configure get region 2>/dev/null || true)
		fi
	fi
	[[ -n $region ]] || die "no AWS region: pass --region or set AWS_REGION"
	if [[ $region != '<region>' && ! $region =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+$ ]]; then
		die "--region $region is not an AWS region name (like us-east-1 or eu-west-1)"
	fi
	if [[ -n $account && ! $account =~ ^[0-9]{12}$ ]]; then
		die "--account $account is not an AWS account ID (12 digits)"
	fi
	if [[ -n $ecr_endpoint && ! $ecr_endpoint =~ ^https?://[^[:space:]]+$ ]]; then
		die "--ecr-endpoint-url $ecr_endpoint is not an http(s) URL"
	fi
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

# The engine: docker buildx where a Docker engine answers (a docker client alone is not
# enough), else buildah. A dry run calls nothing, so there a docker client is enough.
if [[ -z $engine ]]; then
	if command -v docker >/dev/null 2>&1 && { $dry_run || docker info >/dev/null 2>&1; }; then
		engine=docker
	else
		engine=buildah
	fi
fi
if ! $dry_run; then
	case $engine in
	docker) docker buildx version >/dev/null 2>&1 || die "docker buildx not available" ;;
	buildah) command -v buildah >/dev/null 2>&1 || die "neither a Docker engine nor buildah found (apt-get install buildah)" ;;
	esac
	command -v go >/dev/null 2>&1 || die "go not found: the build context gets the Go modules vendored by the host's go"
	if $chart; then
		# shellcheck source=deploy/lib.sh
		source deploy/lib.sh
		ensure_helm
	fi
	if $sign; then
		command -v jq >/dev/null 2>&1 || die "jq not found: signing writes the provenance with it"
		if [[ -z ${COSIGN:-} || -z ${CYCLONEDX_GOMOD:-} ]]; then
			tools=$(bash scripts/image/tools.sh) || die "could not build cosign and cyclonedx-gomod (scripts/image/tools.sh)"
			COSIGN=${COSIGN:-$(sed -n 's/^COSIGN=//p' <<<"$tools")}
			CYCLONEDX_GOMOD=${CYCLONEDX_GOMOD:-$(sed -n 's/^CYCLONEDX_GOMOD=//p' <<<"$tools")}
		fi
		[[ -x $COSIGN ]] || die "cosign ($COSIGN) is not executable"
		[[ -x $CYCLONEDX_GOMOD ]] || die "cyclonedx-gomod ($CYCLONEDX_GOMOD) is not executable"
	fi
fi
COSIGN=${COSIGN:-cosign}
CYCLONEDX_GOMOD=${CYCLONEDX_GOMOD:-cyclonedx-gomod}

revision=$(git rev-parse HEAD 2>/dev/null) || die "not a git checkout: the image is tagged with the commit"
sha_tag=${revision:0:12}
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	sha_tag+=-dirty
fi
# The commit's time, so that two builds of one commit carry the same date.
build_date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)

# 1. Where to push, and the login it needs.
if [[ -n $registry ]]; then
	registry_host=${registry%%/*}
	image=$registry/$repository
	chart_repo=$registry/charts
else
	# ecr_cmd OP ARGS...: sets cmd to the AWS CLI's `ecr OP` in the region, through the
	# endpoint given, for the account given (or the credentials' own).
	ecr_cmd() {
		local op=$1
		shift
		cmd=(aws ecr "$op" "$@" --region "$region")
		if [[ -n $ecr_endpoint ]]; then cmd+=(--endpoint-url "$ecr_endpoint"); fi
	}
	registry_id=()
	registry_ids=()
	if [[ -n $account ]]; then
		registry_id=(--registry-id "$account")
		registry_ids=(--registry-ids "$account")
	fi
	# ecr_die OP: stop with what the CLI said about OP (in $aws_err), and a hint.
	ecr_die() {
		local said hint=""
		said=$(grep -v '^[[:space:]]*$' "$aws_err" || true)
		case $said in
		*"Unable to locate credentials"* | *"could not be found"* | *"NoCredentials"* | *"Token has expired"* | *"token has expired"*)
			hint="no usable AWS credentials: set AWS_PROFILE (aws sso login), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run aws configure"
			;;
		*"Could not connect to the endpoint URL"* | *"scoped to a valid region"* | *"Invalid endpoint"*)
			hint="is --region $region right? ECR was not reachable, or refused that region"
			;;
		*"UnrecognizedClient"* | *"security token included in the request is invalid"* | *"signature we calculated does not match"*)
			hint="the AWS credentials were refused: check AWS_PROFILE or the access keys"
			;;
		*"AccessDenied"* | *"not authorized"*)
			hint="missing IAM permission: deploy/README.md lists the ones this script needs"
			;;
		esac
		die "aws ecr $1 failed${hint:+: $hint}"$'\n'"${said:-(no message)}"
	}

	# ensure_ecr_repository NAME: created on first use; sets ecr_mutability to the
	# repository's tag mutability (IMMUTABLE unless --mutable-tags created it).
	ensure_ecr_repository() {
		ecr_cmd describe-repositories --repository-names "$1" "${registry_id[@]}" \
			--query 'repositories[0].imageTagMutability' --output text
		show "${cmd[@]}"
		if ! $dry_run && ecr_mutability=$("${cmd[@]}" 2>"$aws_err"); then
			echo "   $1 exists (tags $ecr_mutability)"
			return 0
		fi
		if ! $dry_run && ! grep -q RepositoryNotFoundException "$aws_err"; then ecr_die describe-repositories; fi
		ecr_cmd create-repository --repository-name "$1" "${registry_id[@]}" \
			--image-scanning-configuration scanOnPush=true \
			--image-tag-mutability "$mutability" \
			--encryption-configuration encryptionType=AES256 \
			--query 'repository.imageTagMutability' --output text
		show "${cmd[@]}"
		ecr_mutability=$mutability
		if ! $dry_run; then
			ecr_mutability=$("${cmd[@]}" 2>"$aws_err") || ecr_die create-repository
		fi
	}

	aws_err=$(mktemp)
	trap 'rm -f "$aws_err"' EXIT
	ensure_ecr_repository "$repository"
	# Immutable tags: a tag already there would only fail the push after the build. A tag
	# counts as there unless ECR answers ImageNotFound for it (a manifest list may come
	# back as another failure when its media type is not among the accepted ones).
	if [[ $ecr_mutability != MUTABLE ]]; then
		# shellcheck disable=SC2016 # JMESPath's literal backticks
		ecr_cmd batch-get-image --repository-name "$repository" "${registry_id[@]}" \
			--image-ids "imageTag=$sha_tag" "imageTag=$version" \
			--query 'failures[?failureCode==`ImageNotFound`].imageId.imageTag' --output text
		show "${cmd[@]}"
		if ! $dry_run; then
			missing=$("${cmd[@]}" 2>"$aws_err") || ecr_die batch-get-image
			existing=()
			for tag in "$sha_tag" "$version"; do
				if [[ $'\t'${missing//[[:space:]]/$'\t'}$'\t' != *$'\t'$tag$'\t'* ]]; then existing+=("$tag"); fi
			done
			if ((${#existing[@]} > 0)); then
				die "$repository already has the tag(s) ${existing[*]} and its tags are immutable ($ecr_mutability):" \
					"nothing built or pushed. Push another --version (a new commit for the commit tag $sha_tag)."
			fi
		fi
	fi
	if $chart; then ensure_ecr_repository "charts/$(basename deploy/chart/*)"; fi

	# The registry host and its login, both from the authorization token: its
	# proxyEndpoint names the host and it decodes to USER:PASSWORD. The password goes
	# through a pipe, never a command line.
	ecr_cmd get-authorization-token "${registry_ids[@]}" \
		--query 'authorizationData[0].[proxyEndpoint,authorizationToken]' --output text
	show "${cmd[@]}"
	if $dry_run; then
		# No token in a dry run: ECR's conventional host stands in for the proxyEndpoint.
		registry_host=${account:-<account-id>}.dkr.ecr.$region.amazonaws.com
		registry_user=AWS
	else
		token=$("${cmd[@]}" 2>"$aws_err") || ecr_die get-authorization-token
		proxy_endpoint=${token%%$'\t'*}
		token=${token#*$'\t'}
		registry_host=${proxy_endpoint#https://}
		registry_host=${registry_host%/}
		if [[ ! $registry_host =~ ^[A-Za-z0-9.-]+(:[0-9]+)?$ || $token == "$proxy_endpoint" ]]; then
			die "aws ecr get-authorization-token: no proxyEndpoint and token in its answer ($proxy_endpoint)"
		fi
		credentials=$(printf '%s' "$token" | base64 -d 2>/dev/null) || die "aws ecr get-authorization-token: the token is not base64"
		[[ $credentials == *:* ]] || die "aws ecr get-authorization-token: the token is not USER:PASSWORD"
		registry_user=${credentials%%:*}
		registry_password=${credentials#*:}
		unset token credentials
		echo "   registry $registry_host (the token's proxyEndpoint)"
	fi
	image=$registry_host/$repository
	chart_repo=$registry_host/charts

	login=("$engine" login --username "$registry_user" --password-stdin "$registry_host")
	echo "+ <the token's password> | ${login[*]}"
	if ! $dry_run; then
		printf '%s' "$registry_password" | "${login[@]}" || die "$engine login to $registry_host failed"
	fi
	if $chart; then
		login=("${HELM:-helm}" registry login --username "$registry_user" --password-stdin "$registry_host")
		echo "+ <the token's password> | ${login[*]}"
		if ! $dry_run; then
			printf '%s' "$registry_password" | "${login[@]}" || die "helm registry login to $registry_host failed"
		fi
	fi
	if $sign; then
		login=("$COSIGN" login --username "$registry_user" --password-stdin "$registry_host")
		echo "+ <the token's password> | ${login[*]}"
		if ! $dry_run; then
			printf '%s' "$registry_password" | "${login[@]}" || die "cosign login to $registry_host failed"
		fi
	fi
	unset registry_password
fi

# 2. A build context with the Go modules vendored in: the build fetches nothing.
if $dry_run; then
	context='<context>'
	show git ls-files --cached --others --exclude-standard
	echo "+ (cd $context && go mod vendor)"
else
	context=$(mktemp -d)
	trap 'rm -rf "$context" ${aws_err:+"$aws_err"}' EXIT
	git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
		tar --null -T - -cf - | tar -xf - -C "$context"
	(cd "$context" && go mod vendor)
fi

build_args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "BUILD_DATE=$build_date")
if [[ -n $builder_image ]]; then build_args+=(--build-arg "BUILDER_IMAGE=$builder_image"); fi
if [[ -n $runtime_image ]]; then build_args+=(--build-arg "RUNTIME_IMAGE=$runtime_image"); fi
tags=("$sha_tag" "$version")
digest_file=${context}/.digest

build_started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# 3. Build for every platform and push one manifest list under both tags.
if [[ $engine == docker ]]; then
	show docker buildx inspect "$builder"
	if $dry_run || ! docker buildx inspect "$builder" >/dev/null 2>&1; then
		run docker buildx create --name "$builder" --driver docker-container --bootstrap
	fi
	output="type=image,\"name=$image:${tags[0]},$image:${tags[1]}\",push=true"
	if [[ $tls_verify == false ]]; then output+=",registry.insecure=true"; fi
	run docker buildx build --builder "$builder" \
		--platform "$platforms" \
		"${build_args[@]}" \
		--provenance=true --sbom=true \
		--metadata-file "$digest_file.json" \
		--output "$output" "$context"
	if ! $dry_run; then jq -er '."containerimage.digest"' "$digest_file.json" >"$digest_file"; fi
else
	# buildah 1.28 does not set BUILDPLATFORM itself: without it, FROM --platform would
	# pull the builder for every target platform.
	build_platform=linux/$(go env GOARCH 2>/dev/null || uname -m)
	list=localhost/custom-kube-scheduler-webhook-build:$sha_tag
	if ! $dry_run; then buildah manifest rm "$list" >/dev/null 2>&1 || true; fi
	# chroot isolation needs no cgroups or namespaces of its own, so it also builds inside a
	# container or a CI runner; BUILDAH_ISOLATION=oci picks the OCI runtime instead.
	run buildah build --isolation "${BUILDAH_ISOLATION:-chroot}" \
		--platform "$platforms" --build-arg "BUILDPLATFORM=$build_platform" \
		"${build_args[@]}" --pull=missing --tls-verify="$tls_verify" \
		--manifest "$list" -f "$context/Dockerfile" "$context"
	for tag in "${tags[@]}"; do
		run buildah manifest push --all --tls-verify="$tls_verify" --digestfile "$digest_file" \
			"$list" "docker://$image:$tag"
	done
	if ! $dry_run; then buildah manifest rm "$list" >/dev/null; fi
fi

# 4. The chart, at the same version, pointing at the image just pushed.
chart_ref=""
if $chart; then
	chart_src=deploy/chart/custom-kube-scheduler-webhook
	chart_dir=$context/chart/custom-kube-scheduler-webhook
	if ! $dry_run; then
		mkdir -p "$context/chart"
		cp -R "$chart_src" "$context/chart/"
		# image.repository is required in the source chart; the released one names its image
		# by the digest just pushed (what runs is what was pushed, even if the tag moves),
		# and keeps the version tag for people reading the pod spec.
		pushed_digest=$(<"$digest_file")
		[[ $pushed_digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "the push left no digest ($pushed_digest): cannot pin the chart's image"
		sed -i -E -e "s|^(  repository:) \"\"$|\1 \"$image\"|" \
			-e "s|^(  tag:) \"\"$|\1 \"$version\"|" \
			-e "s|^(  digest:) \"\"$|\1 \"$pushed_digest\"|" "$chart_dir/values.yaml"
		for want in "repository: \"$image\"" "tag: \"$version\"" "digest: \"$pushed_digest\""; do
			grep -qF "  $want" "$chart_dir/values.yaml" || die "could not set image.${want%%:*} in the packaged chart"
		done
	else
		echo "+ (the packaged chart's values: image.repository=$image image.tag=$version image.digest=<the pushed digest>)"
	fi
	run "${HELM:-helm}" package "$chart_dir" --version "$version" --app-version "$version" --destination "$context"
	push=("${HELM:-helm}" push "$context/custom-kube-scheduler-webhook-$version.tgz" "oci://$chart_repo")
	if [[ $tls_verify == false ]]; then push+=(--plain-http); fi
	show "${push[@]}"
	if ! $dry_run; then
		"${push[@]}" >"$context/chart-push.log" 2>&1 || {
			cat "$context/chart-push.log" >&2
			die "helm push failed"
		}
		cat "$context/chart-push.log"
		chart_digest=$(sed -n 's/^Digest: //p' "$context/chart-push.log")
		[[ $chart_digest =~ ^sha256:[0-9a-f]{64}$ ]] || ! $sign || die "helm push printed no chart digest to sign"
	fi
	chart_ref=oci://$chart_repo/custom-kube-scheduler-webhook
fi

# 5. Signatures and attestations, on the digests just pushed (a tag can move; a digest
# cannot), the same for the buildah and the docker path.
if $sign; then
	if $dry_run; then digest='<digest>' chart_digest='<chart digest>'; else digest=$(<"$digest_file"); fi
	cosign_flags=(--yes)
	if [[ -n $sign_key ]]; then cosign_flags+=(--key "$sign_key"); fi
	if ! $tlog; then cosign_flags+=(--tlog-upload=false); fi
	if [[ $tls_verify == false ]]; then cosign_flags+=(--allow-insecure-registry --allow-http-registry); fi
	run "$COSIGN" sign "${cosign_flags[@]}" "$image@$digest"

	# The SBOM: the modules compiled into the binary (cyclonedx-gomod app over the vendored
	# context, with the Dockerfile's build constraints), and the runtime base image as a
	# component. cyclonedx-gomod takes the main module's version from a git tag on HEAD, so
	# the context gets a throwaway repository whose empty commit is tagged v<version>.
	sbom=$context/sbom.cdx.json
	sbom_env="CGO_ENABLED=0 GOOS=linux GOARCH=${platforms%%,*}"
	sbom_env=${sbom_env/GOARCH=linux\//GOARCH=}
	echo "+ (cd $context && git init && git commit --allow-empty && git tag v$version && $sbom_env $CYCLONEDX_GOMOD app -json -main cmd/custom-kube-scheduler-webhook -output sbom.cdx.json)"
	runtime_ref=${runtime_image:-$(sed -n 's/^ARG RUNTIME_IMAGE=//p' Dockerfile)}
	if ! $dry_run; then
		(
			cd "$context"
			git init -q
			git -c user.name=build_and_push.sh -c user.email=build@localhost -c commit.gpgsign=false commit -q --allow-empty -m "SBOM of $revision"
			git tag "v$version"
			# shellcheck disable=SC2086 # the variables, one word each
			env $sbom_env "$CYCLONEDX_GOMOD" app -json -main cmd/custom-kube-scheduler-webhook -output "$sbom.tmp"
		) >"$context/sbom.log" 2>&1 || {
			cat "$context/sbom.log" >&2
			die "cyclonedx-gomod app failed"
		}
		rm -rf "$context/.git"
		jq --arg ref "$runtime_ref" '.components += [{"type": "container",
			"name": ($ref | split("@")[0] | sub(":[^/:]*$"; "")),
			"version": ($ref | if test("@") then split("@")[1] else ((capture(":(?<t>[^/:]*)$") | .t) // "") end),
			"description": "the runtime base image (RUNTIME_IMAGE); its own packages are not listed"}]' "$sbom.tmp" >"$sbom"
	fi
	run "$COSIGN" attest "${cosign_flags[@]}" --type cyclonedx --predicate "$sbom" "$image@$digest"

	# SLSA provenance v0.2: who built what from which commit, with which bases and arguments.
	provenance=$context/provenance.json
	echo "+ (the SLSA provenance of $image@$digest: the commit $revision, the bases, the build arguments)"
	if ! $dry_run; then
		jq -n --arg builder "build_and_push.sh ($engine, $(uname -n))" --arg engine "$engine" \
			--arg repo "$(git config --get remote.origin.url 2>/dev/null || echo "file://$PWD")" \
			--arg revision "$revision" --arg version "$version" --arg platforms "$platforms" \
			--arg builder_image "${builder_image:-$(sed -n 's/^ARG BUILDER_IMAGE=//p' Dockerfile)}" \
			--arg runtime_image "$runtime_ref" --arg started "$build_started" \
			--arg finished "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg dirty "${sha_tag#"${revision:0:12}"}" '{
			builder: {id: $builder},
			buildType: "https://github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/build_and_push.sh@v1",
			invocation: {
				configSource: {uri: ("git+" + $repo), digest: {sha1: $revision}, entryPoint: "Dockerfile"},
				parameters: {engine: $engine, platforms: $platforms, version: $version,
					BUILDER_IMAGE: $builder_image, RUNTIME_IMAGE: $runtime_image}
			},
			metadata: {buildStartedOn: $started, buildFinishedOn: $finished,
				completeness: {parameters: true, environment: false, materials: true},
				reproducible: false},
			materials: [{uri: ("git+" + $repo), digest: {sha1: $revision}, annotations: {dirty: ($dirty != "")}},
				{uri: $builder_image}, {uri: $runtime_image}]
		}' >"$provenance"
	fi
	run "$COSIGN" attest "${cosign_flags[@]}" --type slsaprovenance --predicate "$provenance" "$image@$digest"
	if [[ -n $chart_ref ]]; then
		run "$COSIGN" sign "${cosign_flags[@]}" "$chart_repo/custom-kube-scheduler-webhook@$chart_digest"
	fi
fi

echo
if $dry_run; then
	echo "Dry run: would push $image:$sha_tag and $image:$version${chart_ref:+, and the chart $chart_ref:$version}"
	exit 0
fi
digest=$(<"$digest_file")
echo "Pushed $image:$sha_tag and $image:$version"
echo "Image digest: $digest"
if $sign; then
	echo "Signed (cosign $($COSIGN version 2>/dev/null | sed -n 's/^GitVersion: *//p')): $image@$digest, with a CycloneDX SBOM ($(jq '.components | length' "$sbom") components) and SLSA provenance attached${chart_ref:+; the chart $chart_repo/custom-kube-scheduler-webhook@$chart_digest}"
	if [[ -n ${chart_digest:-} ]]; then echo "Chart digest: $chart_digest"; fi
fi
if [[ -n $chart_ref ]]; then
	echo "Chart: $chart_ref --version $version"
	echo "Install or upgrade with:"
	echo "  helm upgrade --install custom-kube-scheduler-webhook $chart_ref --version $version \\"
	plain=""
	if [[ $tls_verify == false ]]; then plain=" --plain-http"; fi
	echo "    --namespace custom-kube-scheduler-webhook --create-namespace$plain"
else
	echo "Install or upgrade with:"
	echo "  helm upgrade --install custom-kube-scheduler-webhook deploy/chart/custom-kube-scheduler-webhook \\"
	echo "    --namespace custom-kube-scheduler-webhook --create-namespace \\"
	echo "    --set image.repository=$image --set image.digest=$digest"
fi
