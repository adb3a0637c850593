# untar FILE: unpacks a .tar.xz or .tar.gz bundle (scripts/gpu-check.sh bundle) beside
# itself. A lent GPU machine may lack the xz program: Python's tarfile reads xz too (its
# lzma module), so that is tried next, and a machine with neither gets a message saying
# so, not a half-unpacked bundle.
untar() {
    local f=$1 to
    to=$(dirname "$f")
    case $f in
    *.tar.gz) tar -xzf "$f" -C "$to" ;;
    *.tar.xz)
        if command -v xz >/dev/null 2>&1; then
            tar -xJf "$f" -C "$to"
        elif command -v python3 >/dev/null 2>&1; then
            python3 -c 'import sys, tarfile
kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$f" "$to"
        else
            echo "cannot unpack $f: neither xz nor python3 on this machine" >&2
            return 1
        fi ;;
    *) echo "not a bundle archive: $f (.tar.xz or .tar.gz)" >&2; return 1 ;;
    esac
}
