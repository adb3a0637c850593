#!/usr/bin/env bash
# check_layers.sh ROOT RULES: every #include "x.h" in ROOT's sources must name a header
# of the including file's own folder or of a folder RULES lets it use (layers.txt).
# Headers are found by file name, so names must be unique across the checked folders.
# Prints each forbidden edge as file:line and exits 1 if there is any.
set -uo pipefail
root=$1 rules=$2
cd "$root" || exit 2
declare -A allowed owner
folders=()
while read -r folder uses; do
    [[ -z $folder || $folder == \#* ]] && continue
    folders+=("$folder")
    allowed[$folder]=" $folder $uses "
done <"$rules"

# The folder a file belongs to: the longest listed folder its directory lies in.
folder_of() {
    local dir=$1 best=""
    for f in "${folders[@]}"; do
        if [[ $dir == "$f" || $dir == "$f"/* ]] && ((${#f} > ${#best})); then best=$f; fi
    done
    echo "$best"
}

bad=0
srcs=$(find common kernels launcher runtime -type f \
           \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.hh' -o -name '*.cu' -o -name '*.cuh' \) | sort)
declare -A folder_cache
for f in $srcs; do
    d=${f%/*}
    [[ -n ${folder_cache[$d]+x} ]] || folder_cache[$d]=$(folder_of "$d")
    case $f in *.h|*.hh|*.cuh)
        b=${f##*/}
        if [[ -n ${owner[$b]+x} ]]; then echo "$f: header name also used by ${owner[$b]}"; bad=1; fi
        owner[$b]=$f ;;
    esac
done
declare -A from_of
for f in $srcs; do
    from=${folder_cache[${f%/*}]}
    if [[ -z $from ]]; then echo "$f: its folder is not in $(basename "$rules")"; bad=1; fi
    from_of[$f]=$from
done
# One grep over every file: file:line:the include's name.
while IFS=: read -r f line inc; do
    from=${from_of[$f]}
    h=${inc##*/}
    [[ -n $from && -n ${owner[$h]+x} ]] || continue # unlisted folder, or a system header
    to=${folder_cache[${owner[$h]%/*}]}
    if [[ ${allowed[$from]} != *" $to "* ]]; then
        echo "$f:$line: includes $inc ($to), which $from may not use"
        bad=1
    fi
done < <(grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $srcs |
         sed -E 's/^([^:]+):([0-9]+):[^"]*"([^"]+)".*/\1:\2:\3/')
exit $bad
