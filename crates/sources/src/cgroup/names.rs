//! The names people know containers by (`checkout-api`, pod `cart-7d9f` in namespace `shop`),
//! which a cgroup path does not carry: it has only the container id. Each runtime keeps them
//! in a file on the host, read here without calling its API (no socket, no daemon needed):
//!
//! | runtime | file | what it gives |
//! |---|---|---|
//! | podman, CRI-O (containers/storage) | `/var/lib/containers/storage/<driver>-containers/containers.json` | `names` of each `id` |
//! | docker | `/var/lib/docker/containers/<id>/config.v2.json` | `Name` (`/web`) |
//! | Kubernetes on containerd (kubelet) | `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` | the link's name |
//!
//! CRI-O and the old dockershim name containers `k8s_<container>_<pod>_<namespace>_<uid>_<n>`,
//! which is split into container, pod and namespace. Kubernetes names cannot hold `_` (they are
//! DNS labels or subdomains), so the separators are unambiguous.
//!
//! Files are re-read only when their modification time changes, and docker's per-container
//! file once per container id, so a sample costs a `stat` per runtime present.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::SystemTime;

use super::identity::{Identity, Runtime};
use crate::fileio::Root;

/// What a container is called.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerNames {
    /// The container's name (`checkout-api`; in Kubernetes, the container's name in its pod).
    pub name: Option<String>,
    /// The Kubernetes pod's name.
    pub pod: Option<String>,
    /// The Kubernetes namespace.
    pub namespace: Option<String>,
}

/// containers/storage keeps its container list per storage driver; overlay is the default, vfs
/// is what runs where overlayfs cannot (the package test's guest, some nested setups).
const STORAGE_DRIVERS: &[&str] = &["overlay", "vfs", "btrfs", "zfs"];
const DOCKER: &str = "/var/lib/docker/containers";
const KUBELET_LOGS: &str = "/var/log/containers";

/// `containers.json` of containers/storage: each container's id and first name.
pub fn parse_storage_containers(json: &[u8]) -> Result<HashMap<String, String>, String> {
    #[derive(serde::Deserialize)]
    struct Entry {
        id: String,
        #[serde(default)]
        names: Vec<String>,
    }
    let entries: Vec<Entry> = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    Ok(entries
        .into_iter()
        .filter_map(|e| Some((e.id, e.names.into_iter().next()?)))
        .collect())
}

/// The `Name` of docker's `config.v2.json`, without its leading `/`.
pub fn parse_docker_config(json: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(rename = "Name")]
        name: String,
    }
    let c: Config = serde_json::from_slice(json).ok()?;
    let name = c.name.trim_start_matches('/');
    (!name.is_empty()).then(|| name.to_string())
}

/// A kubelet log link's file name, `<pod>_<namespace>_<container>-<64hex id>.log`: the id and
/// the names.
pub fn parse_kubelet_log_name(file: &str) -> Option<(String, ContainerNames)> {
    let stem = file.strip_suffix(".log")?;
    let (rest, id) = stem.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut parts = rest.splitn(3, '_');
    let (pod, ns, ctr) = (parts.next()?, parts.next()?, parts.next()?);
    if pod.is_empty() || ns.is_empty() || ctr.is_empty() || ctr.contains('_') {
        return None;
    }
    Some((
        id.to_string(),
        ContainerNames {
            name: Some(ctr.to_string()),
            pod: Some(pod.to_string()),
            namespace: Some(ns.to_string()),
        },
    ))
}

/// A runtime's container name, split when it follows the `k8s_<container>_<pod>_<namespace>_...`
/// convention of CRI-O and dockershim.
pub fn from_runtime_name(name: &str) -> ContainerNames {
    if let Some(rest) = name.strip_prefix("k8s_") {
        let p: Vec<&str> = rest.split('_').collect();
        if p.len() >= 3 && p[..3].iter().all(|s| !s.is_empty()) {
            return ContainerNames {
                name: Some(p[0].to_string()),
                pod: Some(p[1].to_string()),
                namespace: Some(p[2].to_string()),
            };
        }
    }
    ContainerNames {
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// A file re-read when its modification time changes.
#[derive(Debug, Default)]
struct Watched {
    mtime: Option<SystemTime>,
    by_id: HashMap<String, ContainerNames>,
}

impl Watched {
    /// Re-reads `path` with `load` if it changed; an unreadable file empties the map.
    fn refresh(
        &mut self,
        path: &std::path::Path,
        load: impl FnOnce() -> HashMap<String, ContainerNames>,
    ) {
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if mtime.is_none() {
            self.by_id.clear();
        } else if mtime != self.mtime {
            self.by_id = load();
        }
        self.mtime = mtime;
    }
}

/// Names of the containers one walk found, kept between walks.
#[derive(Debug)]
pub struct NameCache {
    root: Root,
    storage: Vec<Watched>,
    kubelet: Watched,
    docker: HashMap<String, Option<ContainerNames>>,
}

impl NameCache {
    /// A cache reading the runtimes' files under `root`.
    pub fn new(root: Root) -> Self {
        NameCache {
            root,
            storage: STORAGE_DRIVERS.iter().map(|_| Watched::default()).collect(),
            kubelet: Watched::default(),
            docker: HashMap::new(),
        }
    }

    /// Fills the names of every container identity in `ids`, where a runtime's file has them.
    pub fn fill<'a>(&mut self, ids: impl Iterator<Item = &'a mut Identity>) {
        let ids: Vec<&mut Identity> = ids.filter(|i| i.container_id.is_some()).collect();
        if ids.is_empty() {
            return;
        }
        let has = |rt: &[Runtime]| ids.iter().any(|i| rt.contains(&i.runtime));
        if has(&[Runtime::Podman, Runtime::CriO]) {
            for (w, driver) in self.storage.iter_mut().zip(STORAGE_DRIVERS) {
                let path = self.root.path(format!(
                    "/var/lib/containers/storage/{driver}-containers/containers.json"
                ));
                w.refresh(&path, || {
                    std::fs::read(&path)
                        .ok()
                        .and_then(|b| parse_storage_containers(&b).ok())
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(id, n)| (id, from_runtime_name(&n)))
                        .collect()
                });
            }
        }
        if ids.iter().any(|i| i.pod_uid.is_some()) {
            let dir = self.root.path(KUBELET_LOGS);
            self.kubelet.refresh(&dir, || {
                let Ok(rd) = std::fs::read_dir(&dir) else {
                    return HashMap::new();
                };
                rd.flatten()
                    .filter_map(|e| parse_kubelet_log_name(e.file_name().to_str()?))
                    .collect()
            });
        }
        let docker_dir: PathBuf = self.root.path(DOCKER);
        let mut seen_docker = std::collections::HashSet::new();
        for id in ids {
            let cid = id.container_id.clone().unwrap_or_default();
            let names = match id.runtime {
                Runtime::Podman | Runtime::CriO => {
                    self.storage.iter().find_map(|w| w.by_id.get(&cid).cloned())
                }
                Runtime::Docker => {
                    seen_docker.insert(cid.clone());
                    self.docker
                        .entry(cid.clone())
                        .or_insert_with(|| {
                            let f = docker_dir.join(&cid).join("config.v2.json");
                            let name = parse_docker_config(&std::fs::read(f).ok()?)?;
                            Some(from_runtime_name(&name))
                        })
                        .clone()
                }
                _ => None,
            }
            .or_else(|| self.kubelet.by_id.get(&cid).cloned());
            if let Some(n) = names {
                id.name = n.name;
                id.pod = n.pod;
                id.namespace = n.namespace;
            }
        }
        // Bounded by the containers alive now: a removed container's entry goes with it.
        self.docker.retain(|k, _| seen_docker.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn kubelet_log_names() {
        let (id, n) =
            parse_kubelet_log_name(&format!("cart-7d9f-x2k_shop_checkout-api-{HEX}.log")).unwrap();
        assert_eq!(id, HEX);
        assert_eq!(n.name.as_deref(), Some("checkout-api"));
        assert_eq!(n.pod.as_deref(), Some("cart-7d9f-x2k"));
        assert_eq!(n.namespace.as_deref(), Some("shop"));
        for bad in [
            format!("_shop_c-{HEX}.log"),
            format!("p_shop_c-{HEX}"),
            format!("p_shop_c-{}.log", &HEX[1..]),
            "p_shop_c-zz.log".to_string(),
            "p_shop.log".to_string(),
            format!("p_shop-{HEX}.log"),
        ] {
            assert_eq!(parse_kubelet_log_name(&bad), None, "{bad}");
        }
    }

    #[test]
    fn k8s_convention_names() {
        let n = from_runtime_name("k8s_checkout-api_cart-7d9f_shop_1f2e-uid_0");
        assert_eq!(
            (n.name.as_deref(), n.pod.as_deref(), n.namespace.as_deref()),
            (Some("checkout-api"), Some("cart-7d9f"), Some("shop"))
        );
        let n = from_runtime_name("web");
        assert_eq!((n.name.as_deref(), n.pod), (Some("web"), None));
        // Not the convention: kept whole.
        assert_eq!(from_runtime_name("k8s_x").name.as_deref(), Some("k8s_x"));
    }

    #[test]
    fn docker_config_name() {
        assert_eq!(
            parse_docker_config(br#"{"ID":"x","Name":"/web","Config":{}}"#).as_deref(),
            Some("web")
        );
        assert_eq!(parse_docker_config(br#"{"Name":"/"}"#), None);
        assert_eq!(parse_docker_config(b"{"), None);
    }

    /// Captured from podman 4.3 in the package test's guest (tests/vm/deb_guest.sh,
    /// `JSVM_CAPTURE_FIXTURES=1 bash tests/vm/deb.sh`): its containers.json, the container
    /// process's /proc/<pid>/cgroup and what `podman inspect` calls it.
    #[test]
    fn podman_container_named_from_its_storage_file() {
        let fx = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/containers/podman"
        ));
        let cg = std::fs::read(fx.join("proc_pid_cgroup")).unwrap();
        let path = crate::cgroup::parse_proc_pid_cgroup(&cg)
            .unwrap()
            .v2
            .unwrap()
            .to_string();
        let inspect = std::fs::read_to_string(fx.join("podman_inspect")).unwrap();
        let (id, name) = inspect.trim().split_once(' ').unwrap();
        let mut ident = crate::cgroup::identify(&path);
        assert_eq!(ident.runtime, Runtime::Podman);
        assert_eq!(ident.container_id.as_deref(), Some(id));
        let mut cache = NameCache::new(Root::new(fx));
        cache.fill(std::iter::once(&mut ident));
        assert_eq!(ident.name.as_deref(), Some(name));
        assert_eq!((ident.pod, ident.namespace), (None, None));
        // Another id is left unnamed; a host without the runtime's files names nothing.
        let mut other = crate::cgroup::identify(&path.replace(&id[..8], "00000000"));
        cache.fill(std::iter::once(&mut other));
        assert_eq!(other.name, None);
        let mut bare = crate::cgroup::identify(&path);
        NameCache::new(Root::new("/nonexistent")).fill(std::iter::once(&mut bare));
        assert_eq!(bare.name, None);
    }

    proptest::proptest! {
        #[test]
        fn parsers_survive_any_input(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300), s in ".{0,200}") {
            let _ = parse_storage_containers(&b);
            let _ = parse_docker_config(&b);
            let _ = parse_kubelet_log_name(&s);
            let _ = from_runtime_name(&s);
        }
    }

    #[test]
    fn malformed_storage_files_are_errors_not_panics() {
        for bad in [&b""[..], b"{", b"[{\"id\":1}]", b"null", b"\xff\xfe"] {
            assert!(parse_storage_containers(bad).is_err());
        }
        assert_eq!(
            parse_storage_containers(br#"[{"id":"a","names":[]},{"id":"b"}]"#).unwrap(),
            HashMap::new()
        );
    }
}
