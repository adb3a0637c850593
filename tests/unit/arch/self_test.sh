#!/usr/bin/env bash
# check_layers.sh must fail on a forbidden include and on a duplicate header name, and
# pass the same tree without them: a checker that passes everything checks nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t"/common "$t"/kernels "$t"/launcher "$t"/runtime/engine
printf 'common\nkernels common\nlauncher common\nruntime/engine kernels common\n' >"$t/rules"
echo '#include "err.h"' >"$t/launcher/main.c"
: >"$t/common/err.h"
: >"$t/kernels/kernels.h"
echo '#include "kernels.h"' >"$t/runtime/engine/layer.c"
"$here/check_layers.sh" "$t" "$t/rules" || { echo "FAIL: a clean tree was refused"; exit 1; }
echo '#include "kernels.h"' >>"$t/launcher/main.c"
if out=$("$here/check_layers.sh" "$t" "$t/rules"); then echo "FAIL: launcher -> kernels passed"; exit 1; fi
grep -q 'launcher/main.c:2: includes kernels.h (kernels), which launcher may not use' <<<"$out" ||
    { echo "FAIL: the message does not name the edge: $out"; exit 1; }
sed -i '$d' "$t/launcher/main.c"
: >"$t/runtime/engine/err.h"
if "$here/check_layers.sh" "$t" "$t/rules" >/dev/null; then echo "FAIL: a duplicate header name passed"; exit 1; fi
echo "check_layers self-test ok"
