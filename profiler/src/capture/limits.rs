//! The CPUs a job may really use: its cpuset (affinity) and its cgroup CPU
//! quota (a container's `--cpus`), not the machine's count. Training jobs
//! often run in containers with CPU limits; judging them against the
//! machine's cores would hide oversubscription.
//!
//! The `CpuLimit` is read once, for the first target, at the start: the online
//! CPUs, its `Cpus_allowed_list`, and the tightest cgroup v2 `cpu.max` or v1
//! CFS quota on its cgroup path; analysis uses the smallest and says which
//! (`cores_source`).

use std::{fs, path::Path};

use tprof_core::recording::CpuLimit;

/// The limits that apply to `pid` now.
pub fn cpu_limit(pid: u32) -> CpuLimit {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let cgroups = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    CpuLimit {
        online: super::procfs::online_cpus(),
        cpuset: cpus_allowed(&status),
        quota: quota(&cgroups, Path::new("/sys/fs/cgroup")),
    }
}

/// CPUs in `Cpus_allowed_list:` of a `/proc/<pid>/status` text ("0-3,8,10-11").
pub fn cpus_allowed(status: &str) -> Option<u32> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut count = 0;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        count += if let Some((a, b)) = part.split_once('-') {
            b.parse::<u32>().ok()?.checked_sub(a.parse::<u32>().ok()?)? + 1
        } else {
            part.parse::<u32>().ok()?;
            1
        };
    }
    Some(count)
}

/// The tightest CPU quota (in CPUs) on the path of the process's cgroup,
/// cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`).
pub fn quota(cgroups: &str, root: &Path) -> Option<f64> {
    let mut tightest: Option<f64> = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let dir = match controllers {
            "" => root.join("unified").join(path.trim_start_matches('/')),
            c if c.split(',').any(|c| c == "cpu") => {
                root.join(c).join(path.trim_start_matches('/'))
            }
            _ => continue,
        };
        // Pure v2 mounts the hierarchy at the root itself.
        let dirs = [dir, root.join(path.trim_start_matches('/'))];
        for dir in &dirs {
            for ancestor in dir.ancestors().take_while(|a| a.starts_with(root)) {
                if let Some(q) = quota_in(ancestor) {
                    tightest = Some(tightest.map_or(q, |t| t.min(q)));
                }
            }
        }
    }
    tightest
}

/// The quota set in one cgroup directory, if any.
fn quota_in(dir: &Path) -> Option<f64> {
    if let Ok(max) = fs::read_to_string(dir.join("cpu.max")) {
        return parse_cpu_max(&max);
    }
    let quota: i64 = fs::read_to_string(dir.join("cpu.cfs_quota_us"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let period: i64 = fs::read_to_string(dir.join("cpu.cfs_period_us"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

/// `cpu.max`: "max 100000" (no limit) or "200000 100000" (2 CPUs).
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota: f64 = fields.next()?.parse().ok()?;
    let period: f64 = fields.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then_some(quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_allowed_cpus() {
        let status = "Name:\tpython\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,8,10-11\n";
        assert_eq!(cpus_allowed(status), Some(7));
        assert_eq!(cpus_allowed("Cpus_allowed_list:\t0\n"), Some(1));
        assert_eq!(cpus_allowed("nothing"), None);
        assert_eq!(cpus_allowed("Cpus_allowed_list:\t3-1\n"), None);
    }

    #[test]
    fn reads_cpu_max() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("250000 100000\n"), Some(2.5));
    }

    #[test]
    fn finds_the_tightest_quota_up_the_hierarchy() {
        let root = tempfile_dir();
        let job = root.join("kubepods/pod1/job");
        fs::create_dir_all(&job).unwrap();
        fs::write(root.join("kubepods/cpu.max"), "800000 100000\n").unwrap();
        fs::write(root.join("kubepods/pod1/cpu.max"), "300000 100000\n").unwrap();
        fs::write(job.join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(quota("0::/kubepods/pod1/job\n", &root), Some(3.0));
        assert_eq!(quota("0::/elsewhere\n", &root), None);
        fs::remove_dir_all(&root).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tprof-limits-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
