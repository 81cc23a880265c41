#!/usr/bin/env bash
# Check and render the Helm chart of deploy/helm/shardstock with a helm
# built from source (helm is a Go module): no binary is downloaded, and
# helm's Kubernetes dependencies stay out of shardstock's go.mod.
#
#   deploy/helm.sh install             build helm into TOOLS/helm once (go install; about 5
#                                      minutes on 2 cores, then nothing while the version holds)
#   deploy/helm.sh path                print the path of that helm
#   deploy/helm.sh lint [ARGS...]      helm lint --strict the chart (ARGS: --set k=v, -f values.yaml)
#   deploy/helm.sh template [ARGS...]  render the chart as release "shardstock" to stdout
#                                      (the chart refuses images by a tag alone: give each by
#                                      digest, --set shards.image=redis:7.2-bookworm@sha256:...,
#                                      or try it with --set images.allowTags=true)
#   deploy/helm.sh helm ARGS...        run that helm with ARGS (helm install, helm upgrade, ...)
#
# environment:
#   SHARDSTOCK_HELM_VERSION  helm.sh/helm/v4@v4.3.2  the module and version to build
#   SHARDSTOCK_TOOLS_DIR     ./run/tools             where the built tools live
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
chart=$here/helm/shardstock
version=${SHARDSTOCK_HELM_VERSION:-helm.sh/helm/v4@v4.3.2}
tools=${SHARDSTOCK_TOOLS_DIR:-$root/run/tools}
helm=$tools/helm

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "helm.sh: $*" >&2; exit 1; }

# built: the helm in TOOLS is the wanted module at the wanted version (its
# `helm version` says only "v4.3" when built by go install: the build
# info in the binary says it all).
built() {
  [ -x "$helm" ] || return 1
  go version -m "$helm" 2>/dev/null | awk -v m="${version%@*}" -v v="${version#*@}" \
    '$1 == "mod" && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}

install() {
  built && return 0
  command -v go >/dev/null || die "go is not installed"
  echo "helm.sh: building ${version} into $tools (go install)"
  mkdir -p "$tools"
  # (the module's cmd/helm; GOFLAGS of the caller, e.g. -mod=vendor, are
  # shardstock's and not helm's)
  (cd "$tools" && GOFLAGS= GOBIN=$tools go install "${version%@*}/cmd/helm@${version#*@}")
  built || die "$helm was built but is not ${version}"
}

need() { built || die "helm is not built: deploy/helm.sh install"; }

cmd=${1:-}; [ $# -gt 0 ] && shift
case "$cmd" in
  install) install ;;
  path) need; echo "$helm" ;;
  lint) need; "$helm" lint --strict "$chart" "$@" ;;
  template) need; "$helm" template shardstock "$chart" "$@" ;;
  helm) need; "$helm" "$@" ;;
  -h|--help|help|"") usage ;;
  *) die "unknown command $cmd (see --help)" ;;
esac
