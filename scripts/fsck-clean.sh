# Sourced by the CI scripts. `fsck_clean IMAGE LABEL`: fsck IMAGE, waiting (up to 10 s) while a
# server that was just unmounted still commits and holds it ("in use"); prints what fsck found
# and exits 1 unless the image is clean. Needs `$nosefs` and a `log` function.
fsck_clean() {
  local image="$1" label="$2" out
  out="$(mktemp)"
  for _ in $(seq 100); do
    if "$nosefs" fsck "$image" >"$out" 2>&1; then
      rm -f "$out"
      log "fsck $label: clean"
      return 0
    fi
    grep -q "in use" "$out" || break
    sleep 0.1
  done
  cat "$out" >&2
  rm -f "$out"
  log "fsck $label found problems"
  exit 1
}
