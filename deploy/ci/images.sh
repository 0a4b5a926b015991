#!/usr/bin/env bash
# CI's image check (the end of .ci/run; deploy/README "Images in CI"): builds every app's image with a real
# engine, then runs the stack from those images exactly as deploy/README documents it (Debian's
# docker-compose 1.29, deploy/docker-compose.yaml + deploy/docker-compose.host.yaml: read-only roots,
# tmpfs /tmp, no capabilities, no-new-privileges, uid 1000) against a fresh database on the machine's
# Postgres and a NATS namespace of its own, and checks it through the edge.
# Skipped only with SKIP_IMAGES=1. Ends with "N passed, N failed"; exit 1 when any check failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "${SKIP_IMAGES:-}" = 1 ]; then echo "== images: skipped (SKIP_IMAGES=1)"; exit 0; fi

ENGINE=${CONTAINER_ENGINE_SCRIPT:-../shared/tools/container-engine.sh}
# Debian's docker CLI, which the engine script installs (another docker earlier on PATH may lack BuildKit).
DOCKER=/usr/bin/docker
export DOCKER
APPS=(edge auth catalog ledger routing media jobs gatewayctl)
export GATEWAY_IMAGE_TAG=ci
DATABASE=gateway_images_ci
export GATEWAY_DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DATABASE
export NATS_NAMESPACE=images-ci-$(date +%s)
export EDGE_PORT=${EDGE_PORT:-8080}
export EDGE_URL=http://127.0.0.1:$EDGE_PORT EDGE_PUBLIC_URL=http://127.0.0.1:$EDGE_PORT
# Secrets of this run only.
GATEWAY_INTERNAL_TOKEN=$(openssl rand -hex 32); GATEWAY_ADMIN_TOKEN=$(openssl rand -hex 32); KEY_HASH_SECRET=$(openssl rand -hex 32)
WEBHOOK_SECRET_KEY=$(openssl rand -base64 32)
export GATEWAY_INTERNAL_TOKEN GATEWAY_ADMIN_TOKEN KEY_HASH_SECRET WEBHOOK_SECRET_KEY
COMPOSE=(docker-compose -p inference-gateway -f deploy/docker-compose.yaml -f deploy/docker-compose.host.yaml)

passed=0; failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
# Counts the PASS/FAIL lines of a smoke.mjs run (already printed).
count() { passed=$((passed + $(grep -c '^PASS' <<<"$1" || true))); failed=$((failed + $(grep -c '^FAIL' <<<"$1" || true))); }
step() { echo "== images: $* ($(date +%T))"; }

cleanup() {
  set +e
  step "cleanup"
  if [ -n "${DOCKER_HOST:-}" ]; then
    "${COMPOSE[@]}" --profile tools down -v --remove-orphans >/dev/null 2>&1
  fi
  psql -h 127.0.0.1 -U postgres -q -c "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" >/dev/null 2>&1
  node deploy/ci/nats-namespace.mjs delete "$NATS_NAMESPACE" 2>/dev/null
  # KEEP_ENGINE=1 leaves dockerd running (a developer's machine where others use it too); CI stops it.
  [ "${KEEP_ENGINE:-}" = 1 ] || bash "$ENGINE" stop
}
trap cleanup EXIT

started=$(date +%s)
step "container engine"
eval "$(bash "$ENGINE")"
if ! command -v docker-compose >/dev/null; then
  apt-get install -y -qq docker-compose >/dev/null 2>&1 || { apt-get update -qq >/dev/null; apt-get install -y -qq docker-compose >/dev/null; }
fi
echo "   $($DOCKER --version); $(docker-compose version --short 2>/dev/null || docker-compose --version)"

# --- build: one compile (the build stage does not depend on APP), then each app's production install ---
for app in "${APPS[@]}"; do
  step "build $app"
  t0=$(date +%s)
  if DOCKER_BUILDKIT=1 $DOCKER build --network host -q -f deploy/Dockerfile --build-arg NODE_IMAGE=local/node:22-bookworm-slim \
      --build-arg APP="$app" -t "inference-gateway-$app:ci" . >/tmp/images-build-$app.log 2>&1; then
    pass "image inference-gateway-$app:ci built in $(( $(date +%s) - t0 )) s"
  else
    tail -40 /tmp/images-build-$app.log; fail "image inference-gateway-$app:ci did not build"
  fi
done
echo "   image sizes:"
for app in "${APPS[@]}"; do
  printf '   %-28s %4d MB\n' "inference-gateway-$app:ci" $(( $($DOCKER image inspect -f '{{.Size}}' "inference-gateway-$app:ci") / 1000000 ))
done

step "image contents"
for app in "${APPS[@]}"; do
  image=inference-gateway-$app:ci
  # node_modules holds no link to a workspace the image lacks, and the image runs as uid 1000.
  dangling=$($DOCKER run --rm --network host --entrypoint find "$image" /app/node_modules -xtype l)
  [ -z "$dangling" ] && pass "$app: no dangling link in node_modules" || fail "$app: dangling links: $dangling"
  uid=$($DOCKER run --rm --network host --entrypoint id "$image" -u)
  [ "$uid" = 1000 ] && pass "$app: runs as uid 1000" || fail "$app: runs as uid $uid"
  case $app in
    media|routing)
      # The ffmpeg the service runs (libs/platform's ffmpegPath(): FFMPEG_PATH first) is Debian's, and the
      # npm package's static 2018 build is not in the image.
      version=$($DOCKER run --rm --network host -w /app/apps/$app "$image" node -e \
        "import('@gateway/platform').then((platform) => process.stdout.write(require('node:child_process').execFileSync(platform.ffmpegPath(), ['-version']).toString().split('\\n')[0] + ' at ' + platform.ffmpegPath()))" 2>&1 || true)
      if [[ "$version" == *"+deb12u"*" at /usr/bin/ffmpeg" ]] && ! $DOCKER run --rm --network host --entrypoint ls "$image" -d /app/node_modules/@ffmpeg-installer >/dev/null 2>&1
      then pass "$app: runs Debian's ffmpeg ($version), holds no npm ffmpeg build"; else fail "$app: ffmpeg is not Debian's: $version"; fi ;;
    *)
      if $DOCKER run --rm --network host --entrypoint sh "$image" -c '! ls -d /app/node_modules/@ffmpeg-installer 2>/dev/null && ! find / -xdev -type f -name ffmpeg 2>/dev/null | grep -q .'
      then pass "$app: no ffmpeg in the image"; else fail "$app: the image holds ffmpeg"; fi ;;
  esac
  # The image's CycloneDX SBOM (deploy/sbom.mjs), kept beside the run's logs: it names what the image holds —
  # every npm package under /app/node_modules, Node, and its Debian packages (ffmpeg where it is installed).
  mkdir -p "${SBOM_DIR:=/tmp/images-sbom}"
  if $DOCKER run --rm --network host --entrypoint cat "$image" /app/sbom.cdx.json > "$SBOM_DIR/$app.cdx.json" 2>/dev/null \
     && summary=$(node deploy/ci/check-sbom.mjs "$SBOM_DIR/$app.cdx.json" "$app" 2>&1); then
    pass "$app: SBOM $SBOM_DIR/$app.cdx.json ($summary)"
  else fail "$app: SBOM missing or incomplete: ${summary:-no /app/sbom.cdx.json}"; fi
done
out=$($DOCKER run --rm --network host -e AUTH_ADDR=127.0.0.1:1 inference-gateway-gatewayctl:ci --help 2>&1 || true)
grep -q 'accounts' <<<"$out" && pass "docker run inference-gateway-gatewayctl:ci --help reaches gatewayctl" || fail "gatewayctl image: $out"

step "stack: database $DATABASE, NATS namespace $NATS_NAMESPACE"
psql -h 127.0.0.1 -U postgres -q -c "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"
touch deploy/providers.env
"${COMPOSE[@]}" up -d --no-build
wait_healthy() {
  local deadline=$(( $(date +%s) + 120 )) service id status
  for service in auth catalog ledger routing media jobs edge; do
    id=$("${COMPOSE[@]}" ps -q "$service")
    while :; do
      status=$($DOCKER inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null || echo missing)
      [ "$status" = healthy ] && break
      if [ "$(date +%s)" -ge "$deadline" ]; then "${COMPOSE[@]}" logs --tail 30 "$service"; return 1; fi
      sleep 1
    done
  done
}
if wait_healthy; then pass "every service healthy"; else fail "a service did not become healthy"; exit 1; fi

for service in auth catalog ledger routing media jobs edge; do
  id=$("${COMPOSE[@]}" ps -q "$service")
  settings=$($DOCKER inspect -f '{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}} {{.Config.User}} {{.HostConfig.NetworkMode}} {{json .HostConfig.Tmpfs}}' "$id")
  [[ "$settings" == 'true [ALL] [no-new-privileges] 1000:1000 host {"/tmp":""}' ]] \
    && pass "$service: read-only root, tmpfs /tmp, no capabilities, no-new-privileges, uid 1000" || fail "$service: runs with $settings"
done

step "gatewayctl in a container"
account=$("${COMPOSE[@]}" run --rm gatewayctl accounts create --name images-ci --credits 10 --tier tier-1 --json 2>/dev/null | tail -1)
ACCOUNT_ID=$(node -e 'process.stdout.write(JSON.parse(process.argv[1]).account_id ?? "")' "$account" 2>/dev/null || true)
export PROV_KEY=$(node -e 'process.stdout.write(JSON.parse(process.argv[1]).provisioning_key ?? "")' "$account" 2>/dev/null || true)
[ -n "$ACCOUNT_ID" ] && [ -n "$PROV_KEY" ] && pass "gatewayctl accounts create ($ACCOUNT_ID)" || fail "gatewayctl accounts create: $account"
key=$("${COMPOSE[@]}" run --rm gatewayctl keys create "$ACCOUNT_ID" --name images-ci --json 2>/dev/null | tail -1)
export API_KEY=$(node -e 'process.stdout.write(JSON.parse(process.argv[1]).api_key ?? "")' "$key" 2>/dev/null || true)
[ -n "$API_KEY" ] && pass "gatewayctl keys create" || fail "gatewayctl keys create: $key"
listed=$($DOCKER run --rm --network host --read-only --cap-drop ALL --security-opt no-new-privileges \
  -e GATEWAY_ADMIN_TOKEN -e AUTH_ADDR=127.0.0.1:50051 -e LEDGER_ADDR=127.0.0.1:50053 -e CATALOG_ADDR=127.0.0.1:50052 \
  inference-gateway-gatewayctl:ci accounts list --json 2>&1 || true)
grep -q "$ACCOUNT_ID" <<<"$listed" && pass "docker run inference-gateway-gatewayctl:ci accounts list" || fail "gatewayctl accounts list: $listed"

step "requests through the edge"
out=$(node deploy/ci/smoke.mjs requests || true); echo "$out"; count "$out"

step "the web console and the operator routes through the edge"
out=$(node deploy/ci/smoke.mjs console || true); echo "$out"; count "$out"
out=$(node deploy/ci/smoke.mjs admin "$ACCOUNT_ID" || true); echo "$out"; count "$out"

step "down && up keeps routing's outbox"
outbox_before=$($DOCKER run --rm --network host -v inference-gateway_routing-outbox:/outbox --entrypoint ls inference-gateway-routing:ci -A /outbox | sort | tr '\n' ' ')
balance_before=$(node deploy/ci/smoke.mjs balance)
"${COMPOSE[@]}" down
"${COMPOSE[@]}" up -d --no-build
if wait_healthy; then pass "every service healthy after down && up"; else fail "not healthy after down && up"; fi
outbox_after=$($DOCKER run --rm --network host -v inference-gateway_routing-outbox:/outbox --entrypoint ls inference-gateway-routing:ci -A /outbox | sort | tr '\n' ' ')
[ -n "$outbox_before" ] && [ "$outbox_before" = "$outbox_after" ] \
  && pass "routing's outbox volume kept across down && up ($outbox_after)" || fail "outbox before: '$outbox_before', after: '$outbox_after'"
balance_after=$(node deploy/ci/smoke.mjs balance)
[ "$balance_before" = "$balance_after" ] && pass "balance unchanged across down && up ($balance_after)" || fail "balance $balance_before before, $balance_after after"
out=$(node deploy/ci/smoke.mjs requests || true); echo "$out"; count "$out"
balance_final=$(node deploy/ci/smoke.mjs balance)
node -e 'process.exit(Number(process.argv[1]) < Number(process.argv[2]) ? 0 : 1)' "$balance_final" "$balance_after" \
  && pass "requests after up are charged ($balance_after -> $balance_final)" || fail "balance $balance_after -> $balance_final after up"

step "docker stop of the edge"
out=$(node deploy/ci/smoke.mjs drain "$("${COMPOSE[@]}" ps -q edge)" || true); echo "$out"; count "$out"

echo "== images: done in $(( $(date +%s) - started )) s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
