# Sourced by scripts/gpu_check.sh and scripts/gpu_paper_regime.sh: install_gpu_wheels SITE NAME installs the wheels
# carried in .gpu/wheels (made by scripts/gpu_check_prepare.sh for the GPU machine's Python 3.12) into SITE with
# $PY's pip, offline and without dependencies. Only the wheels $PY takes are installed: a CPU smoke run on another
# Python skips a version-specific one (its own environment has that package) with a line saying so. NAME prefixes the
# lines; a failed install exits 3.
install_gpu_wheels() {
    local site=$1 name=$2 version wheel tag
    local -a wheels=()
    if ! ls .gpu/wheels/*.whl >/dev/null 2>&1; then
        echo "$name: no wheels in .gpu/wheels (run scripts/gpu_check_prepare.sh where pip works, and carry .gpu)" >&2
        return 0
    fi
    version=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
    for wheel in .gpu/wheels/*.whl; do
        tag=$(basename "$wheel" .whl | awk -F- '{print $(NF-2)}')  # name-version[-build]-python-abi-platform
        case ".$tag." in
            *.py3.*|*.py$version.*|*.cp$version.*) wheels+=("$wheel") ;;
            *) echo "$name: skipping $(basename "$wheel") (built for $tag; this is Python $version)" >&2 ;;
        esac
    done
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "${wheels[@]}" || { echo "$name: installing .gpu/wheels failed" >&2; exit 3; }
}
