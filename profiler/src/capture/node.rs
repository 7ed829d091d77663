//! Which machine and which rank of a job a recording is of: the boot and
//! machine ids, the wall clock's synchronization, and the rank variables in
//! the target's environment. `tprof merge` uses them to tell recordings of
//! one job apart and line them up.

use std::collections::BTreeMap;
use std::fs;

use tprof_core::recording::{NodeIdentity, RankInfo};

use super::clock;

/// Variables launchers set, by what they say; the first one set wins.
const RANK: &[&str] = &["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];
const LOCAL_RANK: &[&str] = &[
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
];
const WORLD_SIZE: &[&str] = &[
    "WORLD_SIZE",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
];
const NODE_RANK: &[&str] = &["GROUP_RANK", "NODE_RANK", "SLURM_NODEID"];
const JOB_ID: &[&str] = &["SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"];

/// The identity of this machine, and the rank of the first target that
/// has one. A launched command's environment is read while it is held
/// before exec, when it is still tprof's own, which `execv` passes on.
pub(super) fn identity(targets: &[u32]) -> NodeIdentity {
    NodeIdentity {
        boot_id: read_id("/proc/sys/kernel/random/boot_id"),
        machine_id: read_id("/etc/machine-id").or_else(|| read_id("/var/lib/dbus/machine-id")),
        clock_sync: clock::clock_sync(),
        rank: targets.iter().find_map(|&pid| {
            let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
            rank_info(pid, &environ)
        }),
    }
}

fn read_id(path: &str) -> Option<String> {
    let id = fs::read_to_string(path).ok()?.trim().to_string();
    (!id.is_empty()).then_some(id)
}

/// The rank variables of an environment block (`KEY=VALUE\0…`); None when
/// it names no rank, local rank, world size or node rank.
pub(super) fn rank_info(pid: u32, environ: &[u8]) -> Option<RankInfo> {
    let wanted = [RANK, LOCAL_RANK, WORLD_SIZE, NODE_RANK, JOB_ID].concat();
    let env: BTreeMap<String, String> = environ
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let text = std::str::from_utf8(entry).ok()?;
            let (key, value) = text.split_once('=')?;
            wanted
                .contains(&key)
                .then(|| (key.to_string(), value.to_string()))
        })
        .collect();
    let first = |names: &[&str]| names.iter().find_map(|n| env.get(*n));
    let number = |names: &[&str]| first(names).and_then(|v| v.trim().parse::<u32>().ok());
    let info = RankInfo {
        pid,
        rank: number(RANK),
        local_rank: number(LOCAL_RANK),
        world_size: number(WORLD_SIZE),
        node_rank: number(NODE_RANK),
        job_id: first(JOB_ID).cloned(),
        env: env.clone(),
    };
    let any = info.rank.is_some()
        || info.local_rank.is_some()
        || info.world_size.is_some()
        || info.node_rank.is_some();
    any.then_some(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_torchrun_and_slurm_variables() {
        let env = b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0GROUP_RANK=1\0\
                    SLURM_PROCID=7\0SLURM_JOB_ID=42\0HOME=/root\0";
        let info = rank_info(9, env).expect("a rank");
        assert_eq!(info.pid, 9);
        // torchrun's RANK wins over Slurm's task id.
        assert_eq!(info.rank, Some(3));
        assert_eq!(info.local_rank, Some(1));
        assert_eq!(info.world_size, Some(8));
        assert_eq!(info.node_rank, Some(1));
        assert_eq!(info.job_id.as_deref(), Some("42"));
        assert_eq!(info.env.get("SLURM_PROCID").map(String::as_str), Some("7"));
        assert!(!info.env.contains_key("PATH"));
        let slurm = rank_info(1, b"SLURM_PROCID=5\0SLURM_NTASKS=16\0").unwrap();
        assert_eq!((slurm.rank, slurm.world_size), (Some(5), Some(16)));
    }

    #[test]
    fn no_rank_variables_is_none() {
        assert_eq!(rank_info(1, b"PATH=/bin\0SLURM_JOB_ID=42\0"), None);
        assert_eq!(rank_info(1, b""), None);
        // A value that is not a number is kept in env but is no rank.
        assert_eq!(rank_info(1, b"RANK=x\0"), None);
    }

    #[test]
    fn this_machine_has_a_boot_id() {
        let node = identity(&[std::process::id()]);
        assert_eq!(node.boot_id.map(|id| id.len()), Some(36));
    }
}
