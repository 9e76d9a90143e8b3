# Sourced by the setup scripts. prepare_venv_dir DIR leaves DIR ready for `python3 -m venv DIR`, or a working venv:
#   - a symbolic link (dangling, or to a venv elsewhere) is removed; its target is not touched;
#   - a folder that is not a venv (no pyvenv.cfg) is moved aside to DIR.moved-aside-N, never deleted;
#   - a venv whose python does not run is emptied by `python3 -m venv --clear` (its packages are reinstalled).
prepare_venv_dir() {
    local dir="$1"
    if [ -L "$dir" ]; then
        echo "note: $dir is a symbolic link (to $(readlink "$dir")); removing the link and creating a venv there" >&2
        rm -- "$dir"
    elif [ -e "$dir" ] && [ ! -f "$dir/pyvenv.cfg" ]; then
        local n=1
        while [ -e "$dir.moved-aside-$n" ]; do n=$((n + 1)); done
        echo "note: $dir is not a virtual environment; moved it aside to $dir.moved-aside-$n" >&2
        mv -- "$dir" "$dir.moved-aside-$n"
    elif [ -e "$dir" ] && ! "$dir/bin/python" -c "" 2>/dev/null; then
        echo "note: $dir is a broken virtual environment; recreating it" >&2
        python3 -m venv --clear "$dir"
    fi
}
