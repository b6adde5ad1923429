# Shared by scripts/serve and scripts/test: find Python >= 3.11, make .venv, install the package.
# Re-installs only when pyproject.toml changed (stamp file inside the venv).

find_python() {
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "remediate needs Python >= 3.11 (apt-get install python3 python3-venv)" >&2
    return 1
}

ensure_venv() {
    # $1: pip extras to install, e.g. "test"; more args: requirements installed in the same pip run
    # (a pin such as torch==2.13.0)
    local extras="${1:-}" python stamp wanted
    shift || true
    python=$(find_python)
    if [ ! -x .venv/bin/python ]; then
        if ! "$python" -m venv .venv 2>/dev/null; then
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
                apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
                "$python" -m venv .venv
            else
                echo "cannot create a virtual environment: install python3-venv" >&2
                return 1
            fi
        fi
    fi
    stamp=.venv/.remediate-installed
    # constraints.txt: the exact runtime versions the image installs, so the suite runs on what ships.
    wanted="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1) extras=$extras $*"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
        .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
        if [ -n "$extras" ]; then
            .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[$extras]" "$@"
        else
            .venv/bin/python -m pip install --quiet -c constraints.txt -e . "$@"
        fi
        echo "$wanted" >"$stamp"
    fi
}

ensure_apt_packages() {
    # $@: pairs "binary:package"; installs the packages whose binary is missing (only as root).
    local missing=() pair
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing Debian packages: ${missing[*]}" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "missing Debian packages: ${missing[*]} (run this script as root, or apt-get install them)" >&2
        return 1
    fi
}

serve_mode_args() {
    # Prints "--mode dry-run" unless the user chose a mode: --mode, $REMEDIATE_MODE, or `mode:` in the config
    # file (--config or $REMEDIATE_CONFIG). scripts/serve starts in shadow mode like the chart: a test alert on
    # a laptop must not cordon a real node. $1: the Python that reads the config file; the rest: serve's args.
    local python="$1" config="${REMEDIATE_CONFIG:-}" previous=""
    shift
    [ -n "${REMEDIATE_MODE:-}" ] && return 0
    for arg in "$@"; do
        case "$arg" in --mode | --mode=*) return 0 ;; --config=*) config="${arg#--config=}" ;; esac
        [ "$previous" = --config ] && config="$arg"
        previous="$arg"
    done
    if [ -n "$config" ] && [ -r "$config" ] &&
        "$python" -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); sys.exit(0 if isinstance(d, dict) and "mode" in d else 1)' "$config" 2>/dev/null; then
        return 0
    fi
    echo "--mode dry-run"
}
