#!/usr/bin/env bash
# The container image and the DaemonSet, run for real (make test-image): boots Debian 13's
# 6.12 kernel with systemd as PID 1 on a trixie rootfs, where tests/vm/image_guest.sh loads
# target/image/jitterscope-*.oci.tar into podman and plays deploy/kubernetes's DaemonSet with
# `podman kube play`, next to a CPU-limited container it must find and name.
#
#   make image && bash tests/vm/image.sh        (make test-image)
#   JSVM_CAPTURE_FIXTURES=1 bash tests/vm/image.sh   # also refresh tests/fixtures/containers/pod
#
# Trixie, not the matrix's bookworm: bookworm's podman 4.3 plays neither DaemonSets (4.7+) nor
# hostPID (it gave the pod a PID namespace of its own), and with its cgroupfs manager its pods'
# infra containers failed (mknod /dev/null: EPERM). trixie's podman 5 plays the DaemonSet with
# three changes: the Namespace is dropped (podman has none), the seccomp field is also written
# as the annotation podman reads, and podman's storage is mounted for the names of this node's
# containers, as the manifest says to do where containers are not Kubernetes pods. The guest's
# log and journal are in target/vm/out/image/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

fresh_share image "$ROOT/target/image/jitterscope-*.oci.tar" image
python3 - "$ROOT/deploy/kubernetes/jitterscope.yaml" "$in/pod.yaml" <<'PY'
import re, sys
docs = re.split(r"^---\s*$", open(sys.argv[1]).read(), flags=re.M)
ds = [d for d in docs if re.search(r"^kind: DaemonSet$", d, flags=re.M)]
if len(ds) != 1:
    sys.exit("image: error: the manifest must hold exactly one DaemonSet")
# podman takes a container's seccomp choice from the annotation Kubernetes used before the
# seccompProfile field; the manifest's field is translated to it.
if "seccompProfile:\n              type: Unconfined" not in ds[0]:
    sys.exit("image: error: the manifest's container no longer asks for an unconfined seccomp profile")
# The template has annotations of its own (Prometheus'): a second `annotations:` key would be
# invalid YAML, so the annotation joins them.
tmpl = "  template:\n    metadata:\n"
if tmpl not in ds[0]:
    sys.exit("image: error: the manifest's pod template has no metadata; update image.sh")
meta = ds[0].split(tmpl, 1)[1].split("    spec:\n", 1)[0]
seccomp = "        container.seccomp.security.alpha.kubernetes.io/record: unconfined\n"
if "      annotations:\n" in meta:
    pod = ds[0].replace(tmpl + meta, tmpl + meta.replace(
        "      annotations:\n", "      annotations:\n" + seccomp, 1), 1)
else:
    pod = ds[0].replace(tmpl, tmpl + "      annotations:\n" + seccomp, 1)
# This node's containers are podman's, not Kubernetes pods: their names are in podman's
# storage, which the manifest says to add on such nodes.
mount = ("            - name: store\n              mountPath: /var/lib/jitterscope\n")
if mount not in pod or not pod.endswith("\n"):
    sys.exit("image: error: the manifest's store mount moved; update image.sh")
pod = pod.replace(mount, mount + "            - name: containers-storage\n"
                  "              mountPath: /var/lib/containers/storage\n"
                  "              readOnly: true\n", 1)
pod += ("        - name: containers-storage\n          hostPath:\n"
        "            path: /var/lib/containers/storage\n            type: Directory\n")
open(sys.argv[2], "w").write(pod)
PY
# systemd and podman; catatonit is the pause process of podman's pods, dbus how podman reaches
# systemd (its cgroup manager); busybox-static the workload container's image.
rootfs_image trixie rootfs-trixie systemd,dbus,podman,catatonit,busybox-static
log "image: running $(basename "$artefact") under podman"
systemd_checks image "${JSVM_IMAGE_GUEST:-$ROOT/tests/vm/image_guest.sh}" "$in" "$out" 6.12 "$ROOTFS_IMAGE"
# What the recorder saw of cgroups from inside its namespace, as the namespace tests' fixture.
if [ "${JSVM_CAPTURE_FIXTURES:-0}" = 1 ]; then
  rm -rf "$ROOT/tests/fixtures/containers/pod"
  mkdir -p "$ROOT/tests/fixtures/containers"
  cp -r "$out/fixtures/pod" "$ROOT/tests/fixtures/containers/pod"
  log "image: fixtures copied to tests/fixtures/containers/pod"
fi
