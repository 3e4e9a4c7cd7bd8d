#!/usr/bin/env bash
# image.sh builds keyhook's container image without a daemon or a registry,
# and with --check runs it. The image is what deploy/Dockerfile builds, laid
# out the same way: a static /keyhook, CA certificates, user and group 65532
# (nonroot), KEYHOOK_HTTP_ADDR=0.0.0.0:8080, port 8080, ENTRYPOINT
# ["/keyhook"], CMD ["serve"]; but from scratch, since base images come
# from a registry. buildah assembles it (vfs storage, in a directory of its
# own) and writes an OCI archive.
#
# Usage:
#   ./scripts/image.sh [--check] [OUT]   OUT defaults to keyhook-image.tar
#
# --check inspects the archive with skopeo, then runs `keyhook version` and
# a short `keyhook dev` from it: in a container (podman, read-only root,
# every capability dropped, no network) where this machine can run one,
# else from the image's unpacked filesystem as its user (chroot, setpriv).
# It says which.
#
# Environment:
#   VERSION  the stamp of `keyhook version` (default: git describe, else dev)
#   KEYHOOK_IMAGE_RUNNER  how --check runs the image: podman, chroot, or
#            auto (default: podman where it can run a container, else chroot)
#   CI       "true" makes a missing tool an error (it always is here: the
#            image cannot be built without buildah)
#
# Needs buildah, and for --check skopeo (Debian packages; .ci/run installs
# them); podman with runc to run a container.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=false
if [[ ${1:-} == --check ]]; then
	check=true
	shift
fi
out=$(realpath -m "${1:-keyhook-image.tar}")
version=${VERSION:-$(git describe --tags --always 2>/dev/null || echo dev)}

# The image's layout; deploy/deploy_test.go holds the Dockerfile and the
# Kubernetes manifests to the archive's config (KEYHOOK_IMAGE).
uid=65532
http_addr=0.0.0.0:8080
port=8080

for tool in buildah $($check && echo skopeo); do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "image.sh: $tool not found (apt-get install $tool)" >&2
		exit 1
	}
done

tmp=$(mktemp -d)
store=(--root "$tmp/storage" --runroot "$tmp/run" --storage-driver vfs)
ctr=""
cleanup() {
	if [[ -n $ctr ]]; then
		buildah "${store[@]}" rm "$ctr" >/dev/null 2>&1 || true
	fi
	if command -v podman >/dev/null 2>&1 && [[ -d $tmp/storage ]]; then
		podman "${store[@]}" rm -af >/dev/null 2>&1 || true
	fi
	# vfs layers may hold read-only directories.
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

step_started=$SECONDS
step() {
	printf '==> %s\n' "$*"
	step_started=$SECONDS
}
step_done() { printf '    done in %d s\n' "$((SECONDS - step_started))"; }

step "build a static keyhook ($version)"
root=$tmp/rootfs
mkdir -p "$root/etc/ssl/certs"
# The Dockerfile's flags: no cgo (the image has no libc), no build paths,
# no symbol tables, the version stamped.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$root/keyhook" ./cmd/keyhook
ca=/etc/ssl/certs/ca-certificates.crt
[[ -s $ca ]] || {
	echo "image.sh: $ca not found (apt-get install ca-certificates)" >&2
	exit 1
}
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
# The user and group distroless names nonroot, for tools that read names.
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n' "$uid" "$uid" >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:%d:\n' "$uid" >"$root/etc/group"
chmod 0755 "$root/keyhook"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/ssl/certs/ca-certificates.crt"
step_done

step "assemble the image from scratch (buildah, vfs)"
ctr=$(buildah "${store[@]}" from scratch)
buildah "${store[@]}" copy "$ctr" "$root" / >/dev/null
buildah "${store[@]}" config \
	--user "$uid:$uid" \
	--env "KEYHOOK_HTTP_ADDR=$http_addr" \
	--port "$port/tcp" \
	--entrypoint '["/keyhook"]' \
	--cmd serve \
	--label "org.opencontainers.image.version=$version" \
	--label "org.opencontainers.image.title=keyhook" \
	"$ctr"
rm -f "$out"
buildah "${store[@]}" commit --quiet --format oci --rm "$ctr" "oci-archive:$out" >/dev/null
ctr=""
printf '    %s, %d MB\n' "$out" "$(($(stat -c %s "$out") / 1000000))"
step_done

$check || exit 0

step "inspect (skopeo)"
skopeo inspect --config "oci-archive:$out" >"$tmp/config.json"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["config"]; print("    user", c["User"], "ports", list(c["ExposedPorts"]), "entrypoint", c["Entrypoint"], "cmd", c["Cmd"], "env", c["Env"])' "$tmp/config.json"
step_done

# podman as this machine allows it: runc (crun refuses cgroups in hybrid
# mode), cgroupfs, and rlimits at or below the caller's own (the default
# ones are refused).
run_flags=(--runtime runc --cgroup-manager cgroupfs)
ctr_flags=(--rm --network none --read-only --cap-drop ALL --security-opt no-new-privileges
	--ulimit "nofile=1024:1024" --ulimit "nproc=1024:1024")
runner=${KEYHOOK_IMAGE_RUNNER:-auto}
in_container=false
if [[ $runner != chroot ]] && command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1; then
	step "load the archive into podman"
	podman "${store[@]}" "${run_flags[@]}" load --quiet --input "$out" >"$tmp/loaded" 2>&1 || cat "$tmp/loaded" >&2
	image=$(sed -n 's/^Loaded image: //p' "$tmp/loaded" | head -n 1)
	step_done
	if [[ -n $image ]] && podman "${store[@]}" "${run_flags[@]}" run "${ctr_flags[@]}" "$image" version >"$tmp/version" 2>"$tmp/podman.err"; then
		in_container=true
	else
		echo "    podman cannot run a container here ($(tail -n 1 "$tmp/podman.err" 2>/dev/null)): running from the unpacked filesystem"
	fi
fi
if [[ $runner == podman ]] && ! $in_container; then
	echo "image.sh: KEYHOOK_IMAGE_RUNNER=podman, but podman (with runc) cannot run the image here" >&2
	exit 1
fi

# run ARGS... runs the image's entrypoint with ARGS, in a container or
# chrooted into the unpacked filesystem as the image's user.
if $in_container; then
	run() { podman "${store[@]}" "${run_flags[@]}" run "${ctr_flags[@]}" --name keyhook-check "$image" "$@"; }
	how="in a container (podman run, read-only root, no capabilities, no network)"
else
	step "unpack the image's filesystem"
	mkdir -p "$tmp/unpacked" "$tmp/archive"
	tar -xf "$out" -C "$tmp/archive"
	python3 - "$tmp/archive" "$tmp/unpacked" <<'PY'
import json, os, sys, tarfile
src, dst = sys.argv[1:]
blob = lambda d: os.path.join(src, "blobs", *d.split(":"))
index = json.load(open(os.path.join(src, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
for layer in manifest["layers"]:
    with tarfile.open(blob(layer["digest"])) as t:
        t.extractall(dst, filter="fully_trusted")
PY
	step_done
	chroot_bin=$(command -v chroot)
	setpriv_bin=$(command -v setpriv)
	# chroot switches to the image's user after entering its filesystem;
	# the environment is the image's alone.
	run() {
		env -i KEYHOOK_HTTP_ADDR="$http_addr" \
			"$setpriv_bin" --no-new-privs \
			"$chroot_bin" --userspec "$uid:$uid" --groups "$uid" "$tmp/unpacked" /keyhook "$@"
	}
	how="from the unpacked filesystem (chroot, user $uid)"
	run version >"$tmp/version"
fi

step "keyhook version, $how"
want="keyhook $version"
got=$(cat "$tmp/version")
if [[ $got != "$want" ]]; then
	echo "image.sh: keyhook version printed \"$got\", want \"$want\"" >&2
	exit 1
fi
echo "    $got"
step_done

step "keyhook dev until its first delivery, $how"
run dev --http-addr 127.0.0.1:0 --log-level error >"$tmp/dev.out" 2>&1 &
dev_pid=$!
deadline=$((SECONDS + 60))
until grep -Eq 'delivered [1-9]' "$tmp/dev.out"; do
	if ! kill -0 "$dev_pid" 2>/dev/null || ((SECONDS > deadline)); then
		cat "$tmp/dev.out" >&2
		echo "image.sh: keyhook dev from the image made no delivery" >&2
		kill "$dev_pid" 2>/dev/null || true
		exit 1
	fi
	sleep 0.2
done
grep -E 'delivered [1-9]' "$tmp/dev.out" | head -n 1 | sed 's/^/    /'
if $in_container; then
	podman "${store[@]}" "${run_flags[@]}" kill --signal INT keyhook-check >/dev/null 2>&1 || true
else
	kill -INT "$dev_pid" 2>/dev/null || true
fi
wait "$dev_pid" || true
step_done
