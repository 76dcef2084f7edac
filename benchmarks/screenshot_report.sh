#!/usr/bin/env bash
# Open a report page in headless Chromium and save what a reader sees, beside the page:
#
#   bash benchmarks/screenshot_report.sh docs/measured-leaderboard.html [WIDTHxHEIGHT]   -> docs/measured-leaderboard.png
#
# Why: the reports are checked in a real browser, not only as files (raw Markdown in an HTML page, labels colliding on
# an axis: neither shows in a test of the file's text). Needs chromium (`apt-get install -y chromium`).
set -euo pipefail
page=${1:?usage: screenshot_report.sh PAGE.html [WIDTHxHEIGHT]}
size=${2:-1400x4000}
[[ -f $page ]] || { echo "screenshot_report: $page: no such file" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[[ -n $browser ]] || { echo "screenshot_report: no chromium on PATH (apt-get install -y chromium)" >&2; exit 2; }
out=${page%.html}.png
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size/x/,}" \
    --screenshot="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")" "file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")" \
    >/dev/null 2>&1
echo "$out"
