//! cgroup v1 and v2 hierarchies (filled in by the cgroup reader).
