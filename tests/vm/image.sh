#!/usr/bin/env bash
# The container image and the DaemonSet, run for real (make test-image): boots Debian 13's
# 6.12 kernel with systemd as PID 1 on a trixie rootfs, where tests/vm/image_guest.sh loads
# target/image/jitterscope-*.oci.tar into podman and plays deploy/kubernetes's DaemonSet with
# `podman kube play`, next to a CPU-limited container it must find and name, diagnose and
# export the episode of, under the manifest's memory limit.
#
#   make image && bash tests/vm/image.sh        (make test-image)
#   JSVM_CAPTURE_FIXTURES=1 bash tests/vm/image.sh   # also refresh tests/fixtures/containers/pod
#
# Trixie, not the matrix's bookworm: bookworm's podman 4.3 plays neither DaemonSets (4.7+) nor
# hostPID (it gave the pod a PID namespace of its own), and with its cgroupfs manager its pods'
# infra containers failed (mknod /dev/null: EPERM). trixie's podman 5 plays the DaemonSet with
# these changes, each asserted against the manifest and said where it is made below: the
# Namespace and ServiceAccount are dropped (podman has neither), the seccomp field is also
# written as the annotation podman reads, spec.nodeName (which podman cannot fill in) becomes
# the node's name, the probes are taken out (the guest asks their path from the node instead),
# the metrics port gets a host port, both exporters are added to the recorder's arguments, and
# podman's storage is mounted for the names of this node's containers, as the manifest says to
# do where containers are not Kubernetes pods. The exporters send to the VictoriaMetrics and
# ClickHouse started here (lib.sh's start_engines). The guest's log and journal are in
# target/vm/out/image/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

fresh_share image "$ROOT/target/image/jitterscope-*.oci.tar" image
# The node's name: the guest takes it as its host name, and the manifest's spec.nodeName
# becomes it (see below).
NODE=jsvm-node-1
python3 - "$ROOT/deploy/kubernetes/jitterscope.yaml" "$in/pod.yaml" "$NODE" "$in/manifest.env" <<'PY'
import sys
import yaml

src, dst, node, env_out = sys.argv[1:5]
def die(why):
    sys.exit(f"image: error: {why}; update tests/vm/image.sh")
docs = [d for d in yaml.safe_load_all(open(src)) if d]
ds = [d for d in docs if d.get("kind") == "DaemonSet"]
if len(ds) != 1:
    die("the manifest must hold exactly one DaemonSet")
# The DaemonSet alone: podman has no Namespace and no ServiceAccount.
ds = ds[0]
tmpl = ds["spec"]["template"]
spec = tmpl["spec"]
ctrs = {c["name"]: c for c in spec["containers"]}
if set(ctrs) != {"record", "serve"}:
    die(f"the pod's containers are {sorted(ctrs)}, not record and serve")
rec, srv = ctrs["record"], ctrs["serve"]

# podman takes a container's seccomp choice from the annotation Kubernetes used before the
# seccompProfile field; the manifest's field is translated to it.
if rec.get("securityContext", {}).get("seccompProfile", {}).get("type") != "Unconfined":
    die("the record container no longer asks for an unconfined seccomp profile")
tmpl["metadata"].setdefault("annotations", {})[
    "container.seccomp.security.alpha.kubernetes.io/record"] = "unconfined"

# The node's name through the downward API, which podman does not have: its kube play fills
# in metadata.name, uid, labels and annotations only, and there is no node. The literal value
# is what a kubelet would fill in: the node's (the guest's) host name.
env = {e["name"]: e for e in rec.get("env", [])}
ref = env.get("JITTERSCOPE_HOST", {}).get("valueFrom", {}).get("fieldRef", {})
if ref.get("fieldPath") != "spec.nodeName":
    die("the record container's JITTERSCOPE_HOST is not the downward API's spec.nodeName")
env["JITTERSCOPE_HOST"].pop("valueFrom")
env["JITTERSCOPE_HOST"]["value"] = node

# The probes: podman runs an httpGet probe with curl inside the container, which this
# shell-less image does not have, and cannot resolve a port named in another container
# ("failed to configure livenessProbe: unknown port: metrics"). They are taken out, and the
# guest asks what they ask from the node: the same path on the same port.
ports = {p["name"]: p for p in srv.get("ports", [])}
metrics = ports.get("metrics")
if not metrics:
    die("the serve container has no port named metrics")
want = {("record", "startupProbe"): "httpGet", ("record", "livenessProbe"): "httpGet",
        ("serve", "readinessProbe"): "httpGet", ("serve", "livenessProbe"): "tcpSocket"}
paths = set()
for (name, kind), how in want.items():
    probe = ctrs[name].get(kind, {}).get(how)
    # A port name resolves among the probe's own container's ports only (as podman and the
    # kubelet do it): the record container names the serve container's port by its number.
    port = "metrics" if name == "serve" else metrics["containerPort"]
    if not probe or probe.get("port") != port:
        die(f"{name}'s {kind} is no longer a {how} on the port {port}")
    if how == "httpGet":
        paths.add(probe["path"])
if len(paths) != 1:
    die(f"the probes ask {sorted(paths)}, not one path")
for c in (rec, srv):
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        c.pop(kind, None)

# A kubelet's node reaches a pod's port at the pod's address; the pod here is on a user-mode
# network (slirp4netns: image_guest.sh says why) that the node cannot address, so the node
# reaches the port through a forwarded host port.
metrics["hostPort"] = metrics["containerPort"]

# Both exporters on, to the engines image.sh runs on the host (as the manifest's comment says
# to add them).
rec["args"] = rec["args"] + ["--remote-write", "http://10.0.2.100:8428/api/v1/write",
                             "--clickhouse", "http://10.0.2.100:8123/"]

# This node's containers are podman's, not Kubernetes pods: their names are in podman's
# storage, which the manifest says to add on such nodes.
if not any(m["name"] == "store" and m["mountPath"] == "/var/lib/jitterscope"
           for m in rec["volumeMounts"]):
    die("the record container's store mount moved")
rec["volumeMounts"].append({"name": "containers-storage",
                            "mountPath": "/var/lib/containers/storage", "readOnly": True})
spec["volumes"].append({"name": "containers-storage",
                        "hostPath": {"path": "/var/lib/containers/storage", "type": "Directory"}})

# What the guest checks against, from the manifest: the recorder's memory limit (set by
# another hand: never a number here), the serve container's user and group, the probes' path.
limit = str(rec["resources"]["limits"]["memory"])
units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9}
unit = next((u for u in sorted(units, key=len, reverse=True) if limit.endswith(u)), "")
limit_bytes = int(limit[: len(limit) - len(unit)]) * units.get(unit, 1)
sc = srv["securityContext"]
with open(env_out, "w") as f:
    f.write(f"NODE={node}\nMEMORY_LIMIT={limit_bytes}\nMEMORY_LIMIT_TEXT={limit}\n"
            f"SERVE_UID={sc['runAsUser']}\nSERVE_GID={sc['runAsGroup']}\n"
            f"PROBE_PATH={paths.pop()}\nMETRICS_PORT={metrics['containerPort']}\n")
yaml.safe_dump(ds, open(dst, "w"), sort_keys=False)
PY
cat "$in/manifest.env" >&2
# The pod's network is slirp4netns', which needs the kernel's tun module: the guest's rootfs
# has no modules of its own (lib.sh), so the module comes in the share.
modules_into "$(kernel_dir 6.12)" "$in/modules" tun
start_engines
# systemd and podman; catatonit is the pause process of podman's pods, dbus how podman reaches
# systemd (its cgroup manager); busybox-static the workload container's image; slirp4netns
# the pod's network.
rootfs_image trixie rootfs-trixie systemd,dbus,podman,catatonit,busybox-static,slirp4netns
log "image: running $(basename "$artefact") under podman"
systemd_checks image "${JSVM_IMAGE_GUEST:-$ROOT/tests/vm/image_guest.sh}" "$in" "$out" 6.12 "$ROOTFS_IMAGE"
# What the recorder saw of cgroups from inside its namespace, as the namespace tests' fixture.
if [ "${JSVM_CAPTURE_FIXTURES:-0}" = 1 ]; then
  rm -rf "$ROOT/tests/fixtures/containers/pod"
  mkdir -p "$ROOT/tests/fixtures/containers"
  cp -r "$out/fixtures/pod" "$ROOT/tests/fixtures/containers/pod"
  log "image: fixtures copied to tests/fixtures/containers/pod"
fi
