#!/usr/bin/env bash
# tokenize_cli.sh DSRUN WORKDIR: text -> tokens -> text through `dsrun tokenize` is the
# identity (file mode, multi-byte UTF-8), invalid UTF-8 fails with its offset and writes
# nothing, and --info checks a file.
set -euo pipefail
dsrun=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work"

printf 'Grüße, 世界 😀\nsecond line\n' >in.txt
"$dsrun" tokenize in.txt out.tok
"$dsrun" tokenize --decode --eot= out.tok back.txt
cmp in.txt back.txt
"$dsrun" tokenize --info out.tok | grep -q '2-byte tokens, 34 tokens, vocab 257: ok'
[[ $("$dsrun" tokenize --decode out.tok - | tail -c 13) == '<|endoftext|>' ]]

printf 'fine\nbad \xc3\x28 here\n' >bad.txt
if "$dsrun" tokenize bad.txt bad.tok 2>err.txt; then echo "invalid UTF-8 accepted"; exit 1; fi
grep -q 'bad.txt: invalid UTF-8 at byte offset 9 (line 2, byte column 5)' err.txt
[[ ! -e bad.tok ]]
"$dsrun" tokenize --bytes bad.txt bad.tok >/dev/null

printf 'XXXXXXXX' >junk.tok
if "$dsrun" tokenize --info junk.tok 2>err.txt; then echo "junk accepted"; exit 1; fi
grep -q 'junk.tok: not a token file (bad magic' err.txt
echo "tokenize CLI: ok"
