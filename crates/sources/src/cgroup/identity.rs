//! Who a cgroup belongs to, read from its path alone: container runtime and id, Kubernetes pod
//! and QoS class, systemd unit.
//!
//! Paths are the only identity every runtime exposes without an API call, and they follow fixed
//! conventions per runtime and cgroup driver:
//!
//! | runtime / driver          | path                                                              |
//! |---------------------------|-------------------------------------------------------------------|
//! | docker, cgroupfs          | `/docker/<64hex>`                                                 |
//! | docker, systemd           | `/system.slice/docker-<64hex>.scope`                              |
//! | k8s, cgroupfs             | `/kubepods/[burstable/|besteffort/]pod<uid>/<64hex>`              |
//! | k8s, systemd, containerd  | `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/cri-containerd-<64hex>.scope` |
//! | cri-o                     | `.../crio-<64hex>.scope` (cgroupfs: `.../crio-<64hex>`)           |
//! | podman                    | `/machine.slice/libpod-<64hex>.scope`, `/libpod_parent/libpod-<64hex>` |
//! | nerdctl (containerd)      | `/system.slice/nerdctl-<64hex>.scope`, `/<namespace>/<64hex>`     |
//! | systemd                   | `/system.slice/nginx.service`, `/user.slice/user-1000.slice/session-3.scope` |
//!
//! A bare 64-hex directory under a pod is labelled containerd: since Kubernetes 1.24 removed
//! dockershim it is the runtime that names containers that way (docker's and cri-o's own names
//! carry a prefix). Conmon's cgroups (`crio-conmon-<id>`, `libpod-conmon-<id>`) hold the
//! monitor, not the container, so they are not given the container's id.

use serde::{Deserialize, Serialize};

/// The container runtime (or service manager) a cgroup belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// Not recognised.
    #[default]
    None,
    /// Docker (moby).
    Docker,
    /// containerd (via CRI or nerdctl).
    Containerd,
    /// CRI-O.
    CriO,
    /// Podman.
    Podman,
    /// A systemd unit that is not a container.
    Systemd,
}

impl Runtime {
    /// Its name as the store, the API and the exports spell it (`cri-o`, as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::None => "none",
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Podman => "podman",
            Runtime::Systemd => "systemd",
        }
    }
}

/// Kubernetes pod QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QosClass {
    /// Requests equal limits; the pod sits directly under `kubepods`.
    Guaranteed,
    /// Has requests below limits.
    Burstable,
    /// No requests or limits.
    BestEffort,
}

/// What a cgroup path says about its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Identity {
    /// The runtime; `Systemd` when only a systemd unit was recognised.
    pub runtime: Runtime,
    /// Full 64-hex container id (of the deepest container in the path, for nested runtimes).
    pub container_id: Option<String>,
    /// Kubernetes pod UID with dashes (systemd's underscores converted back).
    pub pod_uid: Option<String>,
    /// Kubernetes QoS class, when the path is under `kubepods`.
    pub qos: Option<QosClass>,
    /// The deepest systemd unit in the path (`nginx.service`, `session-3.scope`, `docker-<id>.scope`).
    pub systemd_unit: Option<String>,
    /// The container's name, from its runtime's files on the host (not the path; see
    /// `names.rs`). Absent in stores recorded before it was read.
    pub name: Option<String>,
    /// The Kubernetes pod's name, likewise.
    pub pod: Option<String>,
    /// The Kubernetes namespace, likewise.
    pub namespace: Option<String>,
}

impl Identity {
    /// The 12-character short container id that `docker ps` and `crictl ps` show.
    pub fn short_id(&self) -> Option<&str> {
        self.container_id
            .as_deref()
            .map(|id| &id[..12.min(id.len())])
    }

    /// What people call the cgroup's owner, for culprits and tables: the runtime and the
    /// container's name as its runtime shows it, with namespace and pod for Kubernetes
    /// (`containerd shop/checkout-api-7d9f/api (ee295493ada3)`, `podman checkout-api
    /// (ee295493ada3)`); the runtime and short id when the name is unknown; else the systemd
    /// unit; `None` for a cgroup that belongs to no runtime or unit.
    pub fn label(&self) -> Option<String> {
        let rt = self.runtime.as_str();
        match (&self.runtime, self.short_id(), &self.name) {
            (Runtime::None, _, _) => None,
            (_, Some(short), Some(name)) => {
                let pod = match (&self.namespace, &self.pod) {
                    (Some(ns), Some(pod)) => format!("{ns}/{pod}/"),
                    (None, Some(pod)) => format!("{pod}/"),
                    _ => String::new(),
                };
                Some(format!("{rt} {pod}{name} ({short})"))
            }
            (_, Some(short), None) => Some(format!("{rt} {short}")),
            (_, None, _) => self.systemd_unit.clone(),
        }
    }
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

const UNIT_SUFFIXES: &[&str] = &[".service", ".scope", ".slice", ".socket", ".mount", ".swap"];

/// `<prefix><64hex>[.scope]` → the id.
fn prefixed_id<'a>(component: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = component.strip_prefix(prefix)?;
    let id = rest.strip_suffix(".scope").unwrap_or(rest);
    is_container_id(id).then_some(id)
}

/// Pod UID from `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid_>.slice` (systemd).
fn pod_uid(component: &str) -> Option<String> {
    let raw = if let Some(s) = component.strip_suffix(".slice") {
        s.strip_prefix("kubepods-")
            .and_then(|s| s.rfind("pod").map(|i| &s[i + 3..]))?
    } else {
        component.strip_prefix("pod")?
    };
    let ok = raw.len() >= 32
        && raw
            .bytes()
            .all(|c| c.is_ascii_hexdigit() || c == b'-' || c == b'_');
    ok.then(|| raw.replace('_', "-"))
}

fn qos_of(component: &str) -> Option<QosClass> {
    match component {
        "burstable" | "kubepods-burstable.slice" => Some(QosClass::Burstable),
        "besteffort" | "kubepods-besteffort.slice" => Some(QosClass::BestEffort),
        _ => None,
    }
}

/// Reads the owner of a cgroup from its path ("/" for the root). Never fails: an unrecognised
/// path gives `Identity::default()`.
pub fn identify(path: &str) -> Identity {
    let mut id = Identity::default();
    let mut under_kubepods = false;
    let mut prev = "";
    for c in path.split('/').filter(|c| !c.is_empty()) {
        if c == "kubepods" || c == "kubepods.slice" {
            under_kubepods = true;
        } else if under_kubepods {
            if let Some(q) = qos_of(c) {
                id.qos = Some(q);
            } else if let Some(uid) = pod_uid(c) {
                id.qos.get_or_insert(QosClass::Guaranteed);
                id.pod_uid = Some(uid);
            }
        }

        let container = if let Some(x) = prefixed_id(c, "docker-") {
            Some((Runtime::Docker, x))
        } else if let Some(x) = prefixed_id(c, "cri-containerd-") {
            Some((Runtime::Containerd, x))
        } else if let Some(x) = prefixed_id(c, "nerdctl-") {
            Some((Runtime::Containerd, x))
        } else if let Some(x) = prefixed_id(c, "crio-") {
            Some((Runtime::CriO, x))
        } else if let Some(x) = prefixed_id(c, "libpod-") {
            Some((Runtime::Podman, x))
        } else if is_container_id(c) {
            match prev {
                "docker" => Some((Runtime::Docker, c)),
                "libpod_parent" => Some((Runtime::Podman, c)),
                // Under a pod, or under a containerd namespace directory (nerdctl cgroupfs).
                _ => Some((Runtime::Containerd, c)),
            }
        } else {
            None
        };
        if let Some((rt, x)) = container {
            id.runtime = rt;
            id.container_id = Some(x.to_string());
        }
        if UNIT_SUFFIXES
            .iter()
            .any(|s| c.len() > s.len() && c.ends_with(s))
        {
            id.systemd_unit = Some(c.to_string());
        }
        prev = c;
    }
    if id.runtime == Runtime::None && id.systemd_unit.is_some() {
        id.runtime = Runtime::Systemd;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "4e9f979501e142896e0ca4ffd41601314e9f979501e142896e0ca4ffd4160131";
    const UID: &str = "7d3f5a2c-91b8-4c7e-a0f4-2e6b1d9c8a55";
    const UID_: &str = "7d3f5a2c_91b8_4c7e_a0f4_2e6b1d9c8a55";

    fn container(path: &str, rt: Runtime) -> Identity {
        let id = identify(path);
        assert_eq!(id.runtime, rt, "{path}");
        assert_eq!(id.container_id.as_deref(), Some(HEX), "{path}");
        assert_eq!(id.short_id(), Some(&HEX[..12]));
        id
    }

    #[test]
    fn docker_both_drivers() {
        let id = container(&format!("/docker/{HEX}"), Runtime::Docker);
        assert_eq!(id.systemd_unit, None);
        let id = container(
            &format!("/system.slice/docker-{HEX}.scope"),
            Runtime::Docker,
        );
        assert_eq!(id.systemd_unit, Some(format!("docker-{HEX}.scope")));
        assert_eq!(id.pod_uid, None);
    }

    #[test]
    fn kubernetes_cgroupfs() {
        let id = container(
            &format!("/kubepods/burstable/pod{UID}/{HEX}"),
            Runtime::Containerd,
        );
        assert_eq!(id.qos, Some(QosClass::Burstable));
        assert_eq!(id.pod_uid.as_deref(), Some(UID));
        let id = container(&format!("/kubepods/pod{UID}/{HEX}"), Runtime::Containerd);
        assert_eq!(id.qos, Some(QosClass::Guaranteed));
        let id = container(
            &format!("/kubepods/besteffort/pod{UID}/crio-{HEX}"),
            Runtime::CriO,
        );
        assert_eq!(id.qos, Some(QosClass::BestEffort));
        // The pod cgroup itself: pod and class, no container.
        let id = identify(&format!("/kubepods/burstable/pod{UID}"));
        assert_eq!(id.pod_uid.as_deref(), Some(UID));
        assert_eq!(id.container_id, None);
        assert_eq!(id.runtime, Runtime::None);
        assert_eq!(
            identify("/kubepods/burstable").qos,
            Some(QosClass::Burstable)
        );
    }

    #[test]
    fn kubernetes_systemd() {
        let id = container(
            &format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{HEX}.scope"
            ),
            Runtime::Containerd,
        );
        assert_eq!(id.qos, Some(QosClass::Burstable));
        assert_eq!(id.pod_uid.as_deref(), Some(UID));
        assert_eq!(id.systemd_unit, Some(format!("cri-containerd-{HEX}.scope")));
        let id = container(
            &format!("/kubepods.slice/kubepods-pod{UID_}.slice/crio-{HEX}.scope"),
            Runtime::CriO,
        );
        assert_eq!(id.qos, Some(QosClass::Guaranteed));
        assert_eq!(id.pod_uid.as_deref(), Some(UID));
        let id = container(
            &format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/docker-{HEX}.scope"
            ),
            Runtime::Docker,
        );
        assert_eq!(id.qos, Some(QosClass::BestEffort));
        // Conmon is not the container.
        let id = identify(&format!(
            "/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{HEX}.scope"
        ));
        assert_eq!(id.container_id, None);
        assert_eq!(id.pod_uid.as_deref(), Some(UID));
        assert_eq!(id.runtime, Runtime::Systemd);
    }

    #[test]
    fn podman_and_nerdctl() {
        container(
            &format!("/machine.slice/libpod-{HEX}.scope"),
            Runtime::Podman,
        );
        container(
            &format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{HEX}.scope/container"),
            Runtime::Podman,
        );
        container(&format!("/libpod_parent/libpod-{HEX}"), Runtime::Podman);
        container(
            &format!("/system.slice/nerdctl-{HEX}.scope"),
            Runtime::Containerd,
        );
        container(&format!("/default/{HEX}"), Runtime::Containerd);
        let id = identify(&format!("/machine.slice/libpod-conmon-{HEX}.scope"));
        assert_eq!(id.container_id, None);
    }

    #[test]
    fn nested_containers_take_the_deepest() {
        let other = HEX.replace('4', "5");
        let id = identify(&format!("/docker/{other}/docker/{HEX}"));
        assert_eq!(id.container_id.as_deref(), Some(HEX));
        // Children of a container (delegated subtrees) still belong to it.
        let id = identify(&format!("/system.slice/docker-{HEX}.scope/init.scope"));
        assert_eq!(id.container_id.as_deref(), Some(HEX));
        assert_eq!(id.runtime, Runtime::Docker);
        assert_eq!(id.systemd_unit.as_deref(), Some("init.scope"));
    }

    #[test]
    fn systemd_units() {
        let id = identify("/system.slice/nginx.service");
        assert_eq!(id.runtime, Runtime::Systemd);
        assert_eq!(id.systemd_unit.as_deref(), Some("nginx.service"));
        let id = identify("/user.slice/user-1000.slice/session-3.scope");
        assert_eq!(id.systemd_unit.as_deref(), Some("session-3.scope"));
        assert_eq!(id.container_id, None);
        assert_eq!(
            identify("/system.slice").systemd_unit.as_deref(),
            Some("system.slice")
        );
    }

    #[test]
    fn unrecognised() {
        for p in [
            "/",
            "",
            "/process_api/4e9f979501e142896e0ca4ffd4160131",
            "/jitterscope-fixture",
            "/docker",
            &format!("/docker/{}", &HEX[..63]),
            &format!("/docker/{}", HEX.to_uppercase()),
            "/.service",
            "/kubepods/burstable/podnot-a-uid",
        ] {
            let id = identify(p);
            assert_eq!(id.runtime, Runtime::None, "{p}");
            assert_eq!(id.container_id, None, "{p}");
            assert_eq!(id.pod_uid, None, "{p}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,120}") {
            let id = identify(&s);
            let _ = id.short_id();
        }

        #[test]
        fn never_panics_on_plausible(s in "(/(kubepods(\\.slice)?|burstable|pod[0-9a-f_-]{0,40}|(docker|crio|libpod|cri-containerd)-[0-9a-f]{60,66}(\\.scope)?|[a-z]{1,6}\\.(service|slice|scope)|kubepods-[a-z]{0,10}-?pod[0-9a-f_]{30,40}\\.slice|[0-9a-f]{63,65})){0,6}") {
            let id = identify(&s);
            if let Some(c) = &id.container_id {
                proptest::prop_assert_eq!(c.len(), 64);
            }
        }
    }
}
