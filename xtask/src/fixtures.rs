//! `cargo xtask fixtures`: records the committed fixture recordings of the
//! current format version, profiler/core/tests/fixtures/vN/NAME.tprof, from the
//! workloads in tests/workloads, with tprof as it is now. The golden
//! outputs made from them (profiler/core/tests/golden.rs) are then re-blessed
//! with `TPROF_BLESS=1 cargo test -p tprof-core --test golden`.
//!
//! Each fixture is a real recording: a second or two of a small workload,
//! stacks on, chosen so that together they exercise every part of the
//! pipeline (steps, roles, each finding it can, on- and off-CPU stacks,
//! block IO, futexes, CUDA calls and GPU samples through the fake
//! libraries). A recording is not reproducible byte for byte (scheduling,
//! pids, other processes' disk IO), so regenerating changes every golden;
//! what the goldens pin down is what tprof makes of a given file.
//!
//! Older format versions cannot be made by today's tprof: their fixtures
//! were recorded once by the commit that wrote that version, and
//! profiler/core/tests/fixtures/README.md says how.
//!
//! The workloads: tests/workloads/pipeline.c in five shapes,
//! `cuda_copies.c` with the fake libcudart and NVML, `two_functions.c`, and
//! the real PyTorch job (tests/workloads/train_job.py, in the venv setup
//! makes) in four of the zoo's configurations, attached with `-p` after its
//! warm-up (a recording from its start holds torch's imports: megabytes of
//! stacks). Each is recorded in a session of its own at nice -15, so the
//! machine's other work does not shape it, and the version's directory gets
//! a README saying how each was made.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, cargo, command, probe, run as run_cmd};
use crate::{job_env, workloads};

/// The workload name of the real PyTorch job: attached after its warm-up.
const TRAIN_JOB: &str = "train_job.py";

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Record only these fixtures (by name), keeping the version's others
    /// and their rows in its README: to add a fixture without changing
    /// every golden.
    #[arg(long, value_name = "NAME")]
    only: Vec<String>,
}

/// Over this, a fixture is too large to commit: shorten its workload.
const MAX_FIXTURE_BYTES: u64 = 1 << 20;

/// What a fixture's workload needs in an argument or environment value.
#[derive(Clone, Copy)]
enum Value {
    Text(&'static str),
    /// tests/fake_cudart, as the CUDA runtime the workload dlopens.
    FakeCudart,
    /// tests/fake_nvml, as the NVML library tprof loads.
    FakeNvml,
    /// A file of this many MiB on the workspace's disk, for O_DIRECT reads.
    DataFile(u64),
}

struct Fixture {
    name: &'static str,
    workload: &'static str,
    args: &'static [Value],
    env: &'static [(&'static str, Value)],
    /// What it is there to exercise (the README's table).
    exercises: &'static str,
}

use Value::{DataFile, FakeCudart, FakeNvml, Text};

/// A GPU busy, then idle, over and over: NVML series with idle stretches.
const GPU_SCRIPT: (&str, Value) = ("FAKE_NVML_SCRIPT", Text("busy:90:0.3,idle:0:0.2"));

const FIXTURES: &[Fixture] = &[
    Fixture {
        name: "pool",
        workload: "pipeline",
        args: &[Text("3"), Text("40"), Text("20"), Text("1"), Text("cpu")],
        env: &[
            ("PIPELINE_POOL", Text("2")),
            ("TPROF_NVML_LIB", FakeNvml),
            GPU_SCRIPT,
        ],
        exercises: "roles (trainer, data workers, pools), steps, thread_oversubscription, \
                    futex waits at pool barriers, on- and off-CPU stacks, GPU samples",
    },
    Fixture {
        name: "workers",
        workload: "pipeline",
        args: &[Text("6"), Text("150"), Text("20"), Text("1"), Text("cpu")],
        env: &[],
        exercises: "too_many_workers: six single-threaded workers queueing for two cores",
    },
    Fixture {
        name: "disk",
        workload: "pipeline",
        args: &[
            Text("1"),
            Text("40"),
            Text("4096"),
            Text("1"),
            Text("io"),
            DataFile(64),
        ],
        env: &[],
        exercises: "disk_bound: a worker's O_DIRECT reads as block IO it owns, device \
                    statistics, off-CPU stacks in disk waits",
    },
    Fixture {
        name: "decode",
        workload: "pipeline",
        args: &[Text("1"), Text("40"), Text("20"), Text("1"), Text("cpu")],
        env: &[],
        exercises: "decode_bound: one worker busy on a CPU while the other core idles; \
                    the workers' hottest functions",
    },
    Fixture {
        name: "healthy",
        workload: "pipeline",
        args: &[Text("2"), Text("30"), Text("4"), Text("20"), Text("cpu")],
        env: &[],
        exercises: "trainer_cpu_bound: workers that keep up, no input-pipeline finding",
    },
    Fixture {
        name: "cuda",
        workload: "cuda_copies",
        args: &[Text("pageable"), Text("20")],
        env: &[
            ("TPROF_CUDART", FakeCudart),
            ("TPROF_NVML_LIB", FakeNvml),
            GPU_SCRIPT,
        ],
        exercises: "CUDA runtime calls through the fake libcudart: pageable copies with \
                    syncs (pageable_copies), launch counts, GPU idle during syncs",
    },
    Fixture {
        name: "steps",
        workload: "pipeline",
        args: &[Text("2"), Text("30"), Text("2"), Text("20"), Text("cpu")],
        env: &[],
        exercises: "steps from pipe reads (event kind 14, the STEP_PROBES record): a trainer \
                    slower than its workers, every batch ready and each a step",
    },
    Fixture {
        name: "two_functions",
        workload: "two_functions",
        args: &[Text("1")],
        env: &[],
        exercises: "on-CPU stacks split 3:1 between burn_a and burn_b; one thread, taken \
                    for the trainer, and no steps (trainer_cpu_bound)",
    },
    Fixture {
        name: "pid_reuse",
        workload: "pid_reuse",
        args: &[Text("exec")],
        env: &[],
        exercises: "identity: one pid and tid held by a forked worker, then (steered by \
                    ns_last_pid) by a helper that execs a shell; each keeps its own \
                    thread, process, role, stacks and timeline track",
    },
    Fixture {
        name: "zoo_loading",
        workload: TRAIN_JOB,
        args: &[
            Text("--num-workers"),
            Text("0"),
            Text("--dataset"),
            Text("python"),
            Text("--iterations"),
            Text("10"),
        ],
        env: &[
            ("OMP_NUM_THREADS", Text("1")),
            ("MKL_NUM_THREADS", Text("1")),
        ],
        exercises: "the real PyTorch job loading on the training thread: the anatomy's \
                    loading and compute phases from Python frames, libtorch's step and \
                    end-of-__next__ marks, loading_in_trainer",
    },
    Fixture {
        name: "zoo_restart",
        workload: TRAIN_JOB,
        args: &[
            Text("--num-workers"),
            Text("2"),
            Text("--epoch-batches"),
            Text("3"),
            Text("--worker-init-ms"),
            Text("200"),
            Text("--iterations"),
            Text("9"),
        ],
        env: &[
            ("OMP_NUM_THREADS", Text("1")),
            ("MKL_NUM_THREADS", Text("1")),
        ],
        exercises: "the real job's workers restarted every epoch with a slow worker_init_fn: \
                    worker start followed through the fork into open_index, waits followed \
                    to the workers, slow_worker_start",
    },
    Fixture {
        name: "zoo_gil",
        workload: TRAIN_JOB,
        args: &[
            Text("--num-workers"),
            Text("2"),
            Text("--persistent-workers"),
            Text("--metrics-thread"),
            Text("--iterations"),
            Text("10"),
        ],
        env: &[
            ("OMP_NUM_THREADS", Text("1")),
            ("MKL_NUM_THREADS", Text("1")),
        ],
        exercises: "the real job with a metrics thread holding the GIL: the trainer's GIL \
                    waits and their holder, gil_contention",
    },
    Fixture {
        name: "zoo_saturated",
        workload: TRAIN_JOB,
        args: &[
            Text("--num-workers"),
            Text("2"),
            Text("--persistent-workers"),
            Text("--blur"),
            Text("21"),
            Text("--image-size"),
            Text("48"),
            Text("--iterations"),
            Text("30"),
        ],
        env: &[
            ("OMP_NUM_THREADS", Text("1")),
            ("MKL_NUM_THREADS", Text("1")),
        ],
        exercises: "the real job decoding costly images in two workers on two cores: the \
                    trainer waits for batches while the job's CPU work fills the cores, \
                    cpu_saturated and no setting advised",
    },
    Fixture {
        name: "zoo_remote",
        workload: TRAIN_JOB,
        args: &[
            Text("--num-workers"),
            Text("2"),
            Text("--persistent-workers"),
            Text("--dataset"),
            Text("remote"),
            Text("--fetch-ms"),
            Text("1.5"),
            Text("--image-size"),
            Text("96"),
            Text("--epoch-batches"),
            Text("96"),
            Text("--iterations"),
            Text("20"),
        ],
        env: &[
            ("OMP_NUM_THREADS", Text("1")),
            ("MKL_NUM_THREADS", Text("1")),
        ],
        exercises: "the real job's two workers fetching every item from remote storage: \
                    workers asleep while making batches with cores to spare, latency_bound \
                    and more workers",
    },
];

pub(crate) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask fixtures needs root (tprof loads eBPF programs): run it with sudo");
    }
    let tprof = tprof_bin()?;
    // Workloads run from here by relative paths, so their command lines in
    // the recordings (and the goldens) do not name this checkout.
    let stage = cmd::root().join("target/fixtures");
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("cannot clear {}", stage.display()))?;
    }
    fs::create_dir_all(&stage)?;
    let needs = Needs::build(&stage)?;
    for name in &args.only {
        if !FIXTURES.iter().any(|f| f.name == name) {
            bail!("no fixture named {name:?} in xtask/src/fixtures.rs");
        }
    }
    let mut recorded = Vec::new();
    for fixture in FIXTURES
        .iter()
        .filter(|f| args.only.is_empty() || args.only.iter().any(|n| n == f.name))
    {
        let path = record(&tprof, &stage, &needs, fixture)?;
        recorded.push((fixture, path));
    }
    let version = format_version(&recorded[0].1)?;
    let dir = cmd::root().join(format!("profiler/core/tests/fixtures/v{version}"));
    if args.only.is_empty() {
        replace_fixtures(&dir, &recorded)?;
        write_manifest(&dir, version, &recorded)?;
    } else {
        add_fixtures(&dir, &recorded)?;
    }
    println!(
        "\nRecorded {} fixtures into {}.\nNow re-bless their goldens and review the diff:\n  \
         TPROF_BLESS=1 cargo test -p tprof-core --test golden",
        recorded.len(),
        dir.display()
    );
    Ok(())
}

/// `$TPROF_BIN`, else a debug build of tprof (the one the integration tests
/// run).
fn tprof_bin() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TPROF_BIN") {
        return Ok(PathBuf::from(bin));
    }
    run_cmd(cargo().args(["build", "-p", "profiler"]))?;
    Ok(cmd::root().join("target/debug/tprof"))
}

/// The libraries and data file the fixtures' workloads use, built once.
struct Needs {
    fake_cudart: PathBuf,
    fake_nvml: PathBuf,
    data_file: PathBuf,
    /// The train-job venv's interpreter, when a fixture runs the job.
    job_python: Option<PathBuf>,
}

impl Needs {
    fn build(stage: &Path) -> Result<Needs> {
        let mut job_python = None;
        for f in FIXTURES {
            if f.workload == TRAIN_JOB {
                if job_python.is_none() {
                    fs::copy(
                        cmd::root().join("tests/workloads/train_job.py"),
                        stage.join(TRAIN_JOB),
                    )?;
                    job_python = Some(job_env::ensure()?);
                }
                continue;
            }
            workloads::build(f.workload, stage)?;
        }
        let mib = FIXTURES
            .iter()
            .flat_map(|f| f.args.iter())
            .filter_map(|v| match v {
                DataFile(mib) => Some(*mib),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let data_file = stage.join("data.bin");
        write_data_file(&data_file, mib)?;
        Ok(Needs {
            fake_cudart: workloads::build_shared(
                "tests/fake_cudart/fake_cudart.c",
                stage,
                "libcudart-fake.so",
            )?,
            fake_nvml: workloads::build_shared(
                "tests/fake_nvml/fake_nvml.c",
                stage,
                "libnvidia-ml-fake.so",
            )?,
            data_file,
            job_python,
        })
    }

    fn resolve(&self, value: Value) -> String {
        let relative = |p: &Path| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            format!("./{name}")
        };
        match value {
            Text(text) => text.to_string(),
            FakeCudart => relative(&self.fake_cudart),
            // tprof loads NVML itself: a path it can open from the stage.
            FakeNvml => relative(&self.fake_nvml),
            DataFile(_) => relative(&self.data_file),
        }
    }
}

/// MIB MiB of data, synced to the disk (O_DIRECT reads must find it there,
/// not only in the page cache).
fn write_data_file(path: &Path, mib: u64) -> Result<()> {
    use std::io::Write as _;
    let mut file = fs::File::create(path)?;
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for _ in 0..mib {
        file.write_all(&chunk)?;
    }
    file.sync_all()
        .with_context(|| format!("cannot sync {}", path.display()))
}

/// The nice value the workloads run at, so that whatever else the machine
/// runs (builds, other tests) a fixture shows the workload's own behaviour
/// and the finding it was chosen for.
const WORKLOAD_NICE: i32 = -15;

/// Runs `cmd` (tprof, and so the command it launches) in a session of its
/// own whose scheduler autogroup has [`WORKLOAD_NICE`]. With autogroups
/// (`/proc/sys/kernel/sched_autogroup_enabled`) a task's nice value only
/// counts against its own session's tasks; the group's nice is what weighs
/// against other sessions' builds. Without autogroups the write fails and
/// the task's own nice value does the same job.
fn prioritized(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let nice = WORKLOAD_NICE.to_string().into_bytes();
    // SAFETY: the hook runs in the forked child before exec and calls only
    // async-signal-safe functions (setsid, open, write, close,
    // setpriority) on data prepared before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            let path = c"/proc/self/autogroup";
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, nice.as_ptr().cast(), nice.len());
                libc::close(fd);
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, WORKLOAD_NICE);
            Ok(())
        });
    }
}

/// `tprof record` of one fixture's workload, in the stage; returns the
/// recording's path.
fn record(tprof: &Path, stage: &Path, needs: &Needs, fixture: &Fixture) -> Result<PathBuf> {
    let out = stage.join(format!("{}.tprof", fixture.name));
    if fixture.workload == TRAIN_JOB {
        record_attached(tprof, stage, needs, fixture, &out)?;
        return check_size(fixture, out);
    }
    let mut cmd = command(&tprof.to_string_lossy());
    prioritized(&mut cmd);
    cmd.current_dir(stage)
        .args([
            "record",
            "--force",
            "--no-report",
            "--no-flamegraphs",
            "--no-timeline",
        ])
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(format!("./{}", fixture.workload))
        .args(fixture.args.iter().map(|&v| needs.resolve(v)));
    for &(key, value) in fixture.env {
        cmd.env(key, needs.resolve(value));
    }
    run_cmd(&mut cmd)?;
    check_size(fixture, out)
}

/// The real PyTorch job, attached after its warm-up: it waits on a go file
/// once it printed "ready" (its workers alive), tprof attaches with `-p`,
/// and the go file lets the timed iterations run; tprof stops when the job
/// exits.
fn record_attached(
    tprof: &Path,
    stage: &Path,
    needs: &Needs,
    fixture: &Fixture,
    out: &Path,
) -> Result<()> {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;
    let python = needs.job_python.as_ref().context("the train-job venv")?;
    let go = stage.join("go");
    let _ = fs::remove_file(&go);
    let mut job = command(&python.to_string_lossy());
    prioritized(&mut job);
    job.current_dir(stage)
        .arg(format!("./{TRAIN_JOB}"))
        .args([
            "--data-dir",
            "/dev/shm/tprof-train-job-images",
            "--go-file",
            "./go",
        ])
        .args(fixture.args.iter().map(|&v| needs.resolve(v)))
        .stdout(Stdio::piped());
    for &(key, value) in fixture.env {
        job.env(key, needs.resolve(value));
    }
    let mut job = job.spawn().context("start train_job.py")?;
    let lines = BufReader::new(job.stdout.take().context("the job's stdout")?);
    let mut lines = lines.lines();
    let pid = loop {
        let line = lines
            .next()
            .context("train_job.py ended before it was ready")??;
        if line.contains("\"event\":\"ready\"") {
            break job.id();
        }
    };
    let mut rec = command(&tprof.to_string_lossy());
    prioritized(&mut rec);
    rec.current_dir(stage)
        .args([
            "record",
            "--force",
            "--no-report",
            "--no-flamegraphs",
            "--no-timeline",
        ])
        .arg("-o")
        .arg(out)
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::piped());
    let mut rec = rec.spawn().context("start tprof record")?;
    let mut errors = BufReader::new(rec.stderr.take().context("tprof's stderr")?).lines();
    for line in errors.by_ref() {
        if line?.contains("recording") {
            break;
        }
    }
    fs::write(&go, b"")?;
    // The job's output must be read for it not to block on a full pipe.
    for line in lines {
        line?;
    }
    if !job.wait()?.success() {
        bail!("train_job.py failed under fixture {}", fixture.name);
    }
    for line in errors {
        line?;
    }
    if !rec.wait()?.success() {
        bail!("tprof record -p failed for fixture {}", fixture.name);
    }
    Ok(())
}

/// The recording, if it fits the budget.
fn check_size(fixture: &Fixture, out: PathBuf) -> Result<PathBuf> {
    let size = fs::metadata(&out)?.len();
    if size > MAX_FIXTURE_BYTES {
        bail!(
            "fixture {} is {size} bytes, over the {MAX_FIXTURE_BYTES}-byte budget: shorten its \
             workload in xtask/src/fixtures.rs",
            fixture.name
        );
    }
    Ok(out)
}

/// The format version in a recording's preamble (magic, then a u32 LE).
fn format_version(recording: &Path) -> Result<u32> {
    let bytes = fs::read(recording)?;
    let word = bytes
        .get(8..12)
        .with_context(|| format!("{} has no preamble", recording.display()))?;
    Ok(u32::from_le_bytes(word.try_into().expect("4 bytes")))
}

/// Replaces the version's fixtures with the new recordings; a fixture no
/// longer in [`FIXTURES`] goes too.
fn replace_fixtures(dir: &Path, recorded: &[(&Fixture, PathBuf)]) -> Result<()> {
    fs::create_dir_all(dir)?;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "tprof") {
            fs::remove_file(&path)?;
        }
    }
    for (fixture, path) in recorded {
        let to = dir.join(format!("{}.tprof", fixture.name));
        fs::copy(path, &to).with_context(|| format!("cannot write {}", to.display()))?;
    }
    Ok(())
}

/// Adds or replaces these fixtures alone, and their rows in DIR/README.md
/// (`--only`), noting the commit that recorded them.
fn add_fixtures(dir: &Path, recorded: &[(&Fixture, PathBuf)]) -> Result<()> {
    let readme = dir.join("README.md");
    let mut text = fs::read_to_string(&readme)
        .with_context(|| format!("{} is missing: record all fixtures first", readme.display()))?;
    let commit = probe(command("git").args(["rev-parse", "--short", "HEAD"]))
        .map_or_else(|| "unknown".into(), |c| c.trim().to_string());
    for (fixture, path) in recorded {
        let to = dir.join(format!("{}.tprof", fixture.name));
        fs::copy(path, &to).with_context(|| format!("cannot write {}", to.display()))?;
        let args: Vec<String> = fixture
            .args
            .iter()
            .map(|&v| match v {
                Text(t) => t.to_string(),
                _ => "…".into(),
            })
            .collect();
        let env: Vec<String> = fixture
            .env
            .iter()
            .map(|&(k, v)| match v {
                Text(t) => format!("{k}={t}"),
                _ => format!("{k}=…"),
            })
            .collect();
        let env = if env.is_empty() {
            "-".to_string()
        } else {
            format!("`{}`", env.join(" "))
        };
        let row = format!(
            "| {} | `{} {}` | {env} | {} | {} (added alone, by `--only`, at commit {commit}) |",
            fixture.name,
            command_shown(fixture),
            args.join(" "),
            fs::metadata(path)?.len(),
            fixture.exercises
        );
        let prefix = format!("| {} |", fixture.name);
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        if let Some(i) = lines.iter().position(|l| l.starts_with(&prefix)) {
            lines[i] = row;
        } else {
            let last = lines
                .iter()
                .rposition(|l| l.starts_with("| "))
                .unwrap_or(lines.len());
            lines.insert(last + 1, row);
        }
        text = lines.join("\n") + "\n";
    }
    fs::write(&readme, text)?;
    Ok(())
}

/// How a fixture's command reads in the manifest.
fn command_shown(fixture: &Fixture) -> String {
    if fixture.workload == TRAIN_JOB {
        format!(
            "$VENV/bin/python ./{TRAIN_JOB} --data-dir /dev/shm/tprof-train-job-images --go-file \
             ./go` (attached with `tprof record -p` once it printed ready) `"
        )
    } else {
        format!("./{}", fixture.workload)
    }
}

/// DIR/README.md: how each fixture of this version was made.
fn write_manifest(dir: &Path, version: u32, recorded: &[(&Fixture, PathBuf)]) -> Result<()> {
    let commit = probe(command("git").args(["rev-parse", "--short", "HEAD"]))
        .map_or_else(|| "unknown".into(), |c| c.trim().to_string());
    let dirty = probe(command("git").args(["status", "--porcelain", "--untracked-files=no"]))
        .is_some_and(|s| !s.trim().is_empty());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut text = format!(
        "# Format version {version} fixtures\n\n\
         Written by `cargo xtask fixtures` (xtask/src/fixtures.rs); do not edit. Recorded by \
         tprof at commit {commit}{} on Linux {}, each as\n\
         `tprof record --no-report --no-flamegraphs --no-timeline -o \
         NAME.tprof -- CMD` run in the directory that holds the workload (target/fixtures/), in a session of its \
         own at nice {WORKLOAD_NICE} (the task and its scheduler autogroup).\n\n\
         | fixture | command | environment | bytes | exercises |\n|---|---|---|---|---|\n",
        if dirty {
            " (with uncommitted changes)"
        } else {
            ""
        },
        kernel.trim()
    );
    let shown = |v: Value| match v {
        Text(t) => t.to_string(),
        FakeCudart => "./libcudart-fake.so (tests/fake_cudart)".into(),
        FakeNvml => "./libnvidia-ml-fake.so (tests/fake_nvml)".into(),
        DataFile(mib) => format!("./data.bin ({mib} MiB)"),
    };
    for (fixture, path) in recorded {
        let args: Vec<String> = fixture.args.iter().map(|&v| shown(v)).collect();
        let env: Vec<String> = fixture
            .env
            .iter()
            .map(|&(k, v)| format!("{k}={}", shown(v)))
            .collect();
        writeln!(
            text,
            "| {} | `{} {}` | {} | {} | {} |",
            fixture.name,
            command_shown(fixture),
            args.join(" "),
            if env.is_empty() {
                "-".into()
            } else {
                format!("`{}`", env.join(" "))
            },
            fs::metadata(path)?.len(),
            fixture.exercises
        )?;
    }
    fs::write(dir.join("README.md"), text)?;
    Ok(())
}
