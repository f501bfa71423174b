#!/usr/bin/env bash
# Scripts/fuzz NAME [SECONDS]: one libFuzzer harness of Fuzz/ (see Scripts/fuzz). Run from Scripts/fuzz.
#
# The Fuzz package is built (release, or FUZZ_CONFIGURATION=debug) with AddressSanitizer and libFuzzer's coverage on every Swift module
# (the harness's and Marquee's), and linked with libFuzzer's runtime without its main: the harness's main calls
# LLVMFuzzerRunDriver, so the build's other executables (the source embedder the root package's plugins run) stay
# ordinary programs. A package-wide `-sanitize=fuzzer` would give those libFuzzer's main too.
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1
seconds=${2:-60}
# release (the default) fuzzes faster; debug builds in less time, which suits CI's short runs.
configuration=${FUZZ_CONFIGURATION:-release}
[[ "$configuration" == release || "$configuration" == debug ]] || { echo "fuzz: FUZZ_CONFIGURATION is release or debug" >&2; exit 64; }
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "fuzz: SECONDS must be a whole number above 0" >&2; exit 64; }

Scripts/bootstrap
resources=$(swiftc -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["paths"]["runtimeResourcePath"])')
runtime="$resources/clang/lib/linux/libclang_rt.fuzzer_no_main-$(uname -m).a"
[[ -f "$runtime" ]] || { echo "fuzz: this toolchain has no $runtime" >&2; exit 69; }
# Leak reports would fail the build's own tools and the harnesses at exit over caches that live for the process.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
# Swift's own crash backtracer would run inside AddressSanitizer's report; libFuzzer prints the stack itself.
export SWIFT_BACKTRACE=enable=no
echo "fuzz $name: building ($configuration, AddressSanitizer, coverage)"
swift build --package-path Fuzz -c "$configuration" --product "fuzz-$name" \
  -Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=edge,trace-cmp,inline-8bit-counters,pc-table \
  -Xlinker "$runtime" -Xlinker -lstdc++ >/dev/null
harness="$(swift build --package-path Fuzz -c "$configuration" --show-bin-path)/fuzz-$name"

work=".build/fuzz/$name"
corpus="$work/corpus"
mkdir -p "$corpus"
# Seeds: the one-line raw string literals (#"..."#) of the tests that exercise what this harness drives.
case "$name" in
  json) sources="Tests/MarqueeCoreTests/JSONValueTests.swift Tests/APNsSimulatorTests/PayloadScannerTests.swift" ;;
  merge-patch) sources="Tests/MarqueeCoreTests/JSONValueTests.swift Tests/MarqueeServiceTests/EventRoutesTests.swift" ;;
  schema) sources="Tests/MarqueeCoreTests/SchemaTests.swift Tests/MarqueeCoreTests/ContentStateEncodingTests.swift" ;;
  update-body) sources="Tests/MarqueeServiceTests/EventRoutesTests.swift" ;;
  import) sources="Tests/MarqueeServiceTests/InstallationImportParserTests.swift" ;;
  payload-scanner) sources="Tests/APNsSimulatorTests/PayloadScannerTests.swift" ;;
esac
python3 - "$corpus" $sources <<'PY'
import hashlib, os, re, sys
corpus = sys.argv[1]
for path in sys.argv[2:]:
    for literal in re.findall(r'#"(.*?)"#', open(path, encoding="utf-8").read()):
        if "\\#(" in literal:
            continue
        data = literal.encode()
        with open(os.path.join(corpus, "seed-" + hashlib.sha1(data).hexdigest()), "wb") as seed:
            seed.write(data)
PY

regressions="Fuzz/Regressions/$name"
if compgen -G "$regressions/*" >/dev/null; then
  echo "fuzz $name: replaying $(ls "$regressions" | wc -l | tr -d ' ') regression inputs"
  "$harness" "$regressions"/* >"$work/regressions.log" 2>&1 || { cat "$work/regressions.log" >&2; echo "fuzz $name: a regression input fails" >&2; exit 1; }
fi

echo "fuzz $name: $seconds s from $(ls "$corpus" | wc -l | tr -d ' ') inputs"
status=0
"$harness" "$corpus" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/" -timeout=10 -rss_limit_mb=2048 \
  >"$work/run.log" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/run.log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/run.log")
coverage=$({ grep -oE 'cov: [0-9]+' "$work/run.log" || true; } | tail -1 | cut -d' ' -f2)
if [[ $status -ne 0 ]]; then
  { grep -E 'property failed|Fatal error|ERROR: (libFuzzer|AddressSanitizer)|SUMMARY|Test unit written' "$work/run.log" || true; } | head -20 >&2
  echo "fuzz $name: FAILED after ${runs:-?} executions; the input is in $work/ (log: $work/run.log)" >&2
  exit 1
fi
echo "fuzz $name: passed: ${runs:-?} executions in $seconds s (${rate:-?}/s), ${coverage:-?} coverage points, corpus $(ls "$corpus" | wc -l | tr -d ' ') inputs"
