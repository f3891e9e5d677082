# shellcheck shell=bash
# Headless Chromium for the web console's browser tests (tests/ui, driven by chromedp).
# Source after common.sh.
#
# chromium_wanted PKG...  is true when the go test packages include tests/ui or tests/clients
#                         (the TypeScript client's browser suite).
# chromium_setup          finds a Chromium (SLUICE_TEST_CHROMIUM, chromium, chromium-browser,
#                         google-chrome), installs the Debian package `chromium` when none is
#                         found (root only; elsewhere it says what to install), and exports
#                           SLUICE_TEST_CHROMIUM  the browser binary tests/ui starts
#                           SLUICE_TEST_UI_ARTIFACTS  where tests/ui writes its screenshots
#                                                  (kept after the run; printed at the end)

# chromium_wanted PKG... is true when one of the go package patterns covers tests/ui or tests/clients.
chromium_wanted() {
  local p
  for p in "$@"; do
    case "$p" in
      ./... | all | ./tests/... | ./tests/ui | ./tests/ui/ | ./tests/ui/... | \
        github.com/sluicehq/sluice/... | github.com/sluicehq/sluice/tests/... | \
        github.com/sluicehq/sluice/tests/ui | github.com/sluicehq/sluice/tests/ui/... | \
        ./tests/clients | ./tests/clients/ | ./tests/clients/... | \
        github.com/sluicehq/sluice/tests/clients | github.com/sluicehq/sluice/tests/clients/...)
        return 0
        ;;
    esac
  done
  return 1
}

# chromium_find prints the first Chromium binary found, or nothing.
chromium_find() {
  local c
  for c in "${SLUICE_TEST_CHROMIUM:-}" chromium chromium-browser google-chrome; do
    [[ -n "$c" ]] || continue
    if command -v "$c" >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
}

# chromium_setup: see the file comment.
chromium_setup() {
  local bin t0=$SECONDS cache
  bin="$(chromium_find)"
  if [[ -z "$bin" ]]; then
    log "chromium: not found; installing the Debian package chromium (the first run downloads ~100 MB)"
    apt_install chromium fonts-liberation
    bin="$(chromium_find)"
    [[ -n "$bin" ]] || die "chromium: installed the package but found no chromium binary on PATH"
    log "chromium: installed in $((SECONDS - t0))s"
  fi
  log "chromium: $("$bin" --version 2>/dev/null | head -1) ($bin)"
  export SLUICE_TEST_CHROMIUM="$bin"
  cache="${SLUICE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice}"
  if [[ -z "${SLUICE_TEST_UI_ARTIFACTS:-}" ]]; then
    export SLUICE_TEST_UI_ARTIFACTS="$cache/ui-artifacts"
  fi
  mkdir -p "$SLUICE_TEST_UI_ARTIFACTS"
  log "chromium: console screenshots go to $SLUICE_TEST_UI_ARTIFACTS"
}
