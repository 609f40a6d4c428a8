//! The lab never reports on a run that did not happen: settings that cannot run are refused up
//! front, with one line naming the flag and the limit, a non-zero exit, and no chart or JSON.
//! And the README's quick start is the example file, which runs.
//!
//! Runs the real example binaries. `cargo test` builds the examples before it runs the tests;
//! the test also asks cargo to bring a binary up to date (quick when it is), so
//! `cargo test --test lab_cli` alone checks the current code too.

#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The `herd` example binary.
fn herd() -> PathBuf {
    example("herd")
}

/// The binary of example `name` in the profile this test was built in, up to date (built once
/// per test process).
fn example(name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built
        .get_or_insert_with(HashMap::new)
        .entry(name.to_string())
        .or_insert_with(|| build_example(name))
        .clone()
}

fn build_example(name: &str) -> PathBuf {
    // This test runs as target/<profile>/deps/lab_cli-<hash>; the examples sit in
    // target/<profile>/examples/.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let binary = profile_dir.join("examples").join(name);
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let mut build = Command::new(option_env!("CARGO").unwrap_or("cargo"));
    build
        .args(["build", "--quiet", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if release {
        build.arg("--release");
    }
    match build.status() {
        Ok(status) => assert!(
            status.success(),
            "building the {name} example failed ({status}): its binary would be stale"
        ),
        // No cargo to ask (the test binary run by hand): the binary cargo test built.
        Err(e) => assert!(
            binary.exists(),
            "cannot run cargo ({e}) and {} does not exist",
            binary.display()
        ),
    }
    binary
}

/// Runs `herd <args> --json <tmp>` and checks: non-zero exit, exactly one line on stderr that
/// names `flag` and `limit`, nothing on stdout, and no file written.
fn refused(args: &[&str], flag: &str, limit: &str, chart: bool) {
    let dir = std::env::temp_dir().join(format!(
        "herdless-lab-cli-{}-{}",
        std::process::id(),
        args.join("_").replace(['-', ' '], "")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("rows.json");
    let svg = dir.join("chart.svg");
    let mut command = Command::new(herd());
    command.args(args).arg("--json").arg(&json);
    if chart {
        command.arg("--svg").arg(&svg);
    }
    let out = command.output().expect("the herd example runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!(
        "herd {}: {:?}, stderr: {stderr}",
        args.join(" "),
        out.status
    );
    assert!(!out.status.success(), "herd {args:?} must fail: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {stderr}");
    assert!(
        lines[0].contains(flag) && lines[0].contains(limit),
        "the line names {flag} and {limit}: {}",
        lines[0]
    );
    assert!(
        stdout.trim().is_empty(),
        "nothing ran, nothing printed: {stdout}"
    );
    assert!(!json.exists(), "no JSON for a run that did not happen");
    assert!(!svg.exists(), "no chart for a run that did not happen");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stress_with_no_waiter_is_refused() {
    refused(&["stress", "--waiters", "0"], "--waiters", "16384", false);
}

#[test]
fn stress_beyond_the_group_limit_is_refused() {
    refused(
        &["stress", "--waiters", "20000"],
        "--waiters",
        "16384",
        false,
    );
}

#[test]
fn herd_beyond_the_group_limit_is_refused() {
    refused(&["pipe", "--waiters", "100000"], "--waiters", "16384", true);
}

#[test]
fn herd_beyond_the_open_file_limit_is_refused() {
    // SAFETY: rlimit is plain data; getrlimit fills it.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid resource and a pointer to a live rlimit.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    let hard = limit.rlim_max as u64;
    // 4096 waiting threads need about 24 640 descriptors; a hard limit above that leaves
    // nothing to refuse.
    if hard >= 24_640 {
        println!("SKIPPED: the open-file hard limit ({hard}) allows 4096 waiters here");
        return;
    }
    refused(
        &["pipe", "--waiters", "4096"],
        "--waiters",
        "open-file limit",
        true,
    );
}

#[test]
fn help_defaults_parse_as_shown() {
    let out = Command::new(herd())
        .args(["stress", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for default in [
        "pipe,mq",
        "native-rr,native-exclusive,emulated-rr,emulated-exclusive",
    ] {
        assert!(
            help.contains(&format!("[default: {default}]")),
            "stress --help shows [default: {default}]: {help}"
        );
    }
    // What the help shows is what parses: the same values given by hand are accepted (and
    // then refused for the waiter count, before anything runs).
    let out = Command::new(herd())
        .args(["stress", "--workloads", "pipe,mq", "--waiters", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--waiters 0"),
        "parsed, then refused: {stderr}"
    );
}

/// A `Command` for `herd` in which POSIX message queues cannot be created: its
/// RLIMIT_MSGQUEUE is 0, soft and hard, so every `mq_open` fails (EMFILE) while pipes work. A
/// real row that cannot run, found only once it starts, after every setting was accepted.
fn herd_without_message_queues() -> Command {
    herd_with_limit(libc::RLIMIT_MSGQUEUE, 0)
}

/// A `Command` for `herd` whose limit `resource` is `value`, soft and hard.
fn herd_with_limit(resource: libc::__rlimit_resource_t, value: libc::rlim_t) -> Command {
    let mut command = Command::new(herd());
    // SAFETY: between fork and exec the closure only calls setrlimit, which is
    // async-signal-safe, on a local value.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

#[test]
fn stress_fails_when_a_run_did_not_run() {
    // The pipe runs and checks out; the queue cannot be made: the command must not say that
    // nothing was lost "in every run".
    let out = herd_without_message_queues()
        .args(["stress", "--workloads", "pipe,mq", "--modes", "emulated-rr"])
        .args(["--waiters", "2", "--messages", "200"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    assert!(
        !out.status.success(),
        "a run that did not run fails the command"
    );
    assert!(
        stdout.contains("DID NOT RUN"),
        "the table says which: {stdout}"
    );
    assert!(
        !stdout.contains("in every run"),
        "no claim for every run: {stdout}"
    );
    assert!(stderr.contains("1 of 2 runs did not run"), "{stderr}");
}

#[test]
fn herd_writes_no_chart_when_no_row_ran() {
    let dir = std::env::temp_dir().join(format!("herdless-lab-cli-{}-norow", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("rows.json"), dir.join("chart.svg"));
    let out = herd_without_message_queues()
        .args(["mq", "--waiters", "1", "--modes", "native-rr,emulated-rr"])
        .args(["--rotate-every", "adaptive", "--messages", "100"])
        .arg("--json")
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stderr}");
    assert!(!out.status.success(), "no row ran: the command fails");
    assert!(stderr.contains("none of the 2 rows ran"), "{stderr}");
    assert!(!json.exists() && !svg.exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_readme_quick_start_is_the_example_and_it_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let source = std::fs::read_to_string(root.join("examples/quick_start.rs")).unwrap();
    assert!(
        readme.contains(&format!("```rust\n{source}```")),
        "README.md shows examples/quick_start.rs verbatim (copy it again after a change)"
    );
    assert!(
        source.lines().count() <= 40,
        "the quick start fits in 40 lines"
    );
    let out = Command::new(example("quick_start")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the quick start runs and stops");
    // Turns hold when every worker is back in `wait` before the next client connects; a
    // worker not yet scheduled is skipped, not waited for, so on a loaded machine the order
    // varies: this asserts that every connection was served, by one of the four workers (the
    // turns themselves: tests/rotation.rs, tests/processes.rs).
    let served: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("served by worker "))
        .collect();
    assert_eq!(served.len(), 8, "{stdout}");
    assert!(
        served.iter().all(|w| ["0", "1", "2", "3"].contains(w)),
        "{stdout}"
    );
}

#[test]
fn the_forked_workers_example_serves_every_connection() {
    let out = Command::new(example("forked_workers")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the example runs");
    // Threads, then forked processes, 40 connections each (why only the totals: above).
    let threads: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("threads served "))
        .map(|l| {
            l.trim_matches(|c| c == '[' || c == ']')
                .split(", ")
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(threads.len(), 4, "{stdout}");
    assert_eq!(threads.iter().sum::<u64>(), 40, "{stdout}");
    let served: u64 = stdout
        .lines()
        .filter_map(|l| l.split("served Ok(").nth(1))
        .filter_map(|n| n.trim_end_matches(')').parse::<u64>().ok())
        .sum();
    assert_eq!(
        served, 40,
        "the forked workers served every connection: {stdout}"
    );
}

/// Runs `command` to its end; returns (success, stdout, stderr) and the process id it had.
fn run_with_pid(mut command: Command) -> (bool, String, String, u32) {
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("{stdout}{stderr}");
    (out.status.success(), stdout, stderr, pid)
}

/// Named groups the process `pid` left behind in /dev/shm, whose names start with `prefix`.
fn leftover_groups(prefix: &str, pid: u32) -> Vec<String> {
    let start = format!("herdless.{prefix}.{pid}");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&start))
                .collect()
        })
        .unwrap_or_default()
}

/// The `(exec)` row of `setup` in a lab table: its cells.
fn exec_row<'a>(stdout: &'a str, setup: &str) -> Vec<&'a str> {
    let start = format!("| {setup} (exec) |");
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("a row {start}: {stdout}"));
    line.split('|').map(str::trim).collect()
}

#[test]
fn accept_runs_exec_d_workers_on_a_named_group_and_removes_it() {
    let mut command = Command::new(herd());
    command
        .args(["accept", "--spawn", "fork,exec", "--workers", "3"])
        .args(["--connections", "30", "--delay-ms", "1"])
        .args(["--setups", "exclusive,herdless-native,herdless-emulated"]);
    let (ok, stdout, _, pid) = run_with_pid(command);
    assert!(ok, "the run succeeds");
    for setup in ["exclusive", "herdless-native", "herdless-emulated"] {
        let cells = exec_row(&stdout, setup);
        // | setup | wake-ups | empty | ... | per worker | top share | max−min | Jain | lost |
        assert_eq!(cells[cells.len() - 2], "0", "nothing lost: {cells:?}");
        assert!(cells[7].starts_with('['), "per worker: {cells:?}");
    }
    // Turns hold for exec'd workers; the sum is every connection.
    let per_worker: Vec<u64> = exec_row(&stdout, "herdless-emulated")[7]
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(per_worker.iter().sum::<u64>(), 30, "{per_worker:?}");
    assert_eq!(leftover_groups("lab.accept", pid), Vec::<String>::new());
}

/// `herd pipe` and `herd mq` with exec'd waiters: the pipe inherited, the queue opened by name
/// by each waiter; every row runs (a row that reads fewer messages than were written fails),
/// and the row's named group is gone afterwards.
#[test]
fn herd_pipe_and_mq_run_exec_d_waiters() {
    for workload in ["pipe", "mq"] {
        let dir = std::env::temp_dir().join(format!(
            "herdless-lab-cli-{}-exec-{workload}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = Command::new(herd());
        command
            .args([workload, "--spawn", "exec", "--waiters", "3"])
            .args(["--messages", "300", "--rotate-every", "1"])
            .args(["--modes", "no-flag,herdless-native,herdless-emulated"])
            .arg("--json")
            .arg(dir.join("rows.json"))
            .arg("--svg")
            .arg(dir.join("chart.svg"));
        let (ok, stdout, _, pid) = run_with_pid(command);
        assert!(ok, "{workload}: every row ran");
        for setup in [
            "no flag (exec)",
            "herdless native/1 (exec)",
            "herdless emulated/1 (exec)",
        ] {
            assert!(
                stdout.contains(&format!("- {workload} {setup} W=3: [")),
                "{workload} {setup}: {stdout}"
            );
        }
        let json = std::fs::read_to_string(dir.join("rows.json")).unwrap();
        assert!(json.contains("\"spawn\": \"exec\""), "{json}");
        assert_eq!(leftover_groups("lab.herd", pid), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_service_queue_example_serves_every_request_once() {
    for backend in ["native", "emulated"] {
        let mut command = Command::new(example("service_queue"));
        command
            .args(["--servers", "3", "--requests", "300", "--clients", "2"])
            .args(["--gap-us", "100", "--work-us", "0", "--backend", backend]);
        let (ok, stdout, _, pid) = run_with_pid(command);
        assert!(
            ok,
            "{backend}: every request served once, every server reported"
        );
        assert!(
            stdout.contains("lost 0; duplicated 0"),
            "{backend}: {stdout}"
        );
        assert_eq!(
            stdout
                .lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| server"))
                .count(),
            3,
            "{backend}: a line per server: {stdout}"
        );
        assert_eq!(
            leftover_groups("example.service", pid),
            Vec::<String>::new()
        );
    }
}

/// A row whose group was made but which then fails (the queue cannot be made) removes the
/// group's name all the same.
#[test]
fn a_failed_exec_row_removes_its_named_group() {
    let dir =
        std::env::temp_dir().join(format!("herdless-lab-cli-{}-exec-fail", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = herd_without_message_queues();
    command
        .args([
            "mq",
            "--spawn",
            "exec",
            "--waiters",
            "2",
            "--messages",
            "100",
        ])
        .args(["--modes", "native-rr,emulated-rr", "--rotate-every", "1"])
        .arg("--json")
        .arg(dir.join("rows.json"))
        .arg("--svg")
        .arg(dir.join("chart.svg"));
    let (ok, _, stderr, pid) = run_with_pid(command);
    assert!(!ok, "no row ran: the command fails");
    assert!(stderr.contains("none of the 2 rows ran"), "{stderr}");
    assert_eq!(leftover_groups("lab.herd", pid), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("herdless-lab-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An output path that cannot be used fails the command before the first row runs: one line
/// on stderr naming the flag and the path, nothing on stdout, and the missing directory is not
/// made. Checked for `herd pipe`, `herd mq` and the main job (no subcommand), for `--json` and
/// `--svg`.
#[test]
fn herd_output_paths_are_checked_before_the_first_row() {
    let dir = scratch("paths");
    let missing = dir.join("missing").join("deeper");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let good_json = dir.join("rows.json");
    let good_svg = dir.join("chart.svg");
    let bad: Vec<(&str, PathBuf)> = vec![
        ("--json", missing.join("x.json")),
        ("--svg", missing.join("x.svg")),
        // Its directory is a regular file.
        ("--json", file.join("x.json")),
        // A directory, not a file.
        ("--svg", dir.clone()),
    ];
    for workload in [Some("pipe"), Some("mq"), None] {
        for (flag, path) in &bad {
            let mut command = Command::new(herd());
            command.args(workload);
            if workload.is_some() {
                // Small rows, should the check not stop them.
                command.args(["--waiters", "1", "--messages", "10"]);
            }
            let (json, svg) = match *flag {
                "--json" => (path.as_path(), good_svg.as_path()),
                _ => (good_json.as_path(), path.as_path()),
            };
            command.arg("--json").arg(json).arg("--svg").arg(svg);
            let out = command.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stdout = String::from_utf8_lossy(&out.stdout);
            println!("{workload:?} {flag} {}: {stderr}", path.display());
            assert!(!out.status.success(), "{flag} {}: fails", path.display());
            let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            assert_eq!(lines.len(), 1, "one line, before any row ran: {stderr}");
            assert!(
                lines[0].contains(flag) && lines[0].contains(&*path.to_string_lossy()),
                "names the flag and the path: {}",
                lines[0]
            );
            assert!(stdout.trim().is_empty(), "no row ran: {stdout}");
            assert!(!good_json.exists() && !good_svg.exists(), "nothing written");
        }
    }
    assert!(!dir.join("missing").exists(), "the directory was not made");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every mode of `herd pipe` in a small run, given by its earlier `--modes` names: the table,
/// the per-waiter lines and the JSON use the README's names; the table has the CPU column and
/// is followed by the legend of the modes; the run ends with the verdict (herd, herdless
/// against no flag, native against emulated); the JSON has the CPU fields for every row.
#[test]
fn herd_names_modes_as_the_readme_with_cpu_legend_and_verdict() {
    let dir = scratch("names");
    let (json, svg) = (dir.join("rows.json"), dir.join("chart.svg"));
    let out = Command::new(herd())
        .args(["pipe", "--waiters", "1,3", "--messages", "300"])
        .args(["--modes", "plain,native-exclusive,native-rr,emulated-rr"])
        .args(["--rotate-every", "adaptive,1"])
        .arg("--json")
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "every row ran");
    let header = stdout
        .lines()
        .find(|l| l.starts_with("| workload"))
        .expect("a table");
    let columns: Vec<&str> = header.split('|').map(str::trim).collect();
    let cpu = columns
        .iter()
        .position(|c| *c == "CPU µs/msg")
        .unwrap_or_else(|| panic!("a CPU column: {header}"));
    let names = [
        "no flag",
        "raw flag",
        "herdless native",
        "herdless native/1",
        "herdless emulated",
        "herdless emulated/1",
    ];
    for name in names {
        for w in ["1", "3"] {
            let row = stdout
                .lines()
                .find(|l| {
                    let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                    cells.len() > 3 && cells[1] == "pipe" && cells[2] == name && cells[3] == w
                })
                .unwrap_or_else(|| panic!("a row {name} W={w}: {stdout}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let figure: f64 = cells[cpu]
                .parse()
                .unwrap_or_else(|_| panic!("a CPU figure: {row}"));
            assert!(figure.is_finite() && figure >= 0.0, "{row}");
            assert!(
                stdout.contains(&format!("- pipe {name} W={w}: ")),
                "per-waiter line of {name}: {stdout}"
            );
        }
    }
    for old in ["plain", "native-exclusive", "native-rr", "emulated-rr"] {
        for l in stdout.lines() {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            assert!(
                !(cells.len() > 2 && cells[2].starts_with(old)),
                "no row under an old name ({old}): {l}"
            );
            assert!(
                !l.starts_with(&format!("- pipe {old}")),
                "no per-waiter line under an old name: {l}"
            );
        }
    }
    // The legend: one line per mode, right under the table.
    let legend = stdout
        .split("\nModes:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("a legend: {stdout}"));
    for name in [
        "no flag",
        "raw flag",
        "herdless native",
        "herdless emulated",
    ] {
        assert!(
            legend
                .lines()
                .any(|l| l.starts_with(&format!("- {name}: "))),
            "the legend explains {name}: {legend}"
        );
    }
    // The verdict ends the output, computed from the run.
    let verdict = stdout
        .split("### Verdict")
        .nth(1)
        .unwrap_or_else(|| panic!("a verdict: {stdout}"));
    let said: Vec<&str> = verdict
        .lines()
        .filter(|l| l.starts_with("- pipe"))
        .collect();
    assert!(
        said.iter()
            .any(|l| l.contains("the herd") && l.contains("3 waiters")),
        "{verdict}"
    );
    assert!(
        said.iter()
            .any(|l| l.starts_with("- pipe, herdless native at W=3") && l.contains("no flag")),
        "{verdict}"
    );
    assert!(
        said.iter()
            .any(|l| l.contains("native against emulated") && l.contains("CPU")),
        "{verdict}"
    );
    // The JSON: the same names, the CPU of every row.
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = file["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 12, "6 setups × 2 waiter counts");
    for row in rows {
        let mode = row["mode"].as_str().expect("a mode name");
        assert!(names[..].contains(&mode), "{row}");
        let setup = row["setup"].as_str().expect("a setup name");
        assert!(names[..].contains(&setup), "{row}");
        let cpu = row["cpu_us_per_message"].as_f64().expect("CPU per message");
        let seconds = row["cpu_seconds"].as_f64().expect("CPU seconds");
        assert!(cpu >= 0.0 && seconds >= 0.0, "{row}");
    }
    let chart = std::fs::read_to_string(&svg).unwrap();
    for name in [
        "no flag",
        "raw flag",
        "herdless native/1",
        "herdless emulated",
    ] {
        assert!(chart.contains(name), "the chart names {name}");
    }
    assert!(chart.contains("CPU"), "the chart has the CPU panel");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The counts of a `herd soak` final line (`native: lost L, duplicated D, late T, worst
/// arrival-to-read X ms, quiet wake-ups W per server per second ...`): (lost, duplicated,
/// failed). Panics if the line does not have that shape.
fn soak_counts(line: &str, backend: &str) -> (u64, u64, bool) {
    let rest = line
        .strip_prefix(&format!("{backend}: "))
        .unwrap_or_else(|| panic!("a final line for {backend}: {line}"));
    let fields: Vec<&str> = rest.split(", ").collect();
    let count = |i: usize, name: &str| -> u64 {
        fields[i]
            .strip_prefix(&format!("{name} "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("field {i} is `{name} N`: {line}"))
    };
    let (lost, duplicated) = (count(0, "lost"), count(1, "duplicated"));
    count(2, "late");
    let worst = fields[3]
        .strip_prefix("worst arrival-to-read ")
        .and_then(|f| f.strip_suffix(" ms"))
        .unwrap_or_else(|| panic!("field 3 is the worst arrival-to-read: {line}"));
    assert!(worst.parse::<f64>().is_ok(), "{line}");
    let quiet = fields[4]
        .strip_prefix("quiet wake-ups ")
        .and_then(|f| f.split(' ').next())
        .unwrap_or_else(|| panic!("field 4 is the quiet wake-ups: {line}"));
    assert!(quiet == "n/a" || quiet.parse::<f64>().is_ok(), "{line}");
    assert!(fields[4].contains(" per server per second"), "{line}");
    for name in ["descriptors per server ", "memory per server ", "growth: "] {
        assert!(fields.iter().any(|f| f.starts_with(name)), "{name}: {line}");
    }
    (lost, duplicated, line.contains(", FAILED: "))
}

/// `herd soak` on both backends in a few seconds: every server exec'd, killed, stopped and
/// restarted, queues made and retired; the output ends with one line of counts per backend, the
/// exit status is 0 exactly when neither lost nor duplicated anything and neither failed, the
/// JSON has a row per backend, and the named group is gone afterwards.
#[test]
fn soak_ends_with_the_counts_of_each_backend() {
    let dir = scratch("soak");
    let json = dir.join("rows.json");
    let mut command = Command::new(herd());
    command
        .args([
            "soak",
            "--minutes",
            "0.05",
            "--servers",
            "3",
            "--queues",
            "2",
        ])
        .args(["--rate", "100"])
        .arg("--json")
        .arg(&json);
    let (ok, stdout, _, pid) = run_with_pid(command);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() >= 2, "{stdout}");
    let native = soak_counts(lines[lines.len() - 2], "native");
    let emulated = soak_counts(lines[lines.len() - 1], "emulated");
    let clean =
        |(lost, duplicated, failed): (u64, u64, bool)| lost == 0 && duplicated == 0 && !failed;
    assert_eq!(
        ok,
        clean(native) && clean(emulated),
        "exit status 0 exactly when nothing was lost or duplicated and no run failed"
    );
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = file.as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{file}");
    for (row, backend) in rows.iter().zip(["native", "emulated"]) {
        assert_eq!(row["backend"], backend, "{row}");
        assert!(
            row["sent"].as_u64().is_some_and(|n| n > 0),
            "requests went out: {row}"
        );
        assert!(
            row["churn"]["kills"].as_u64().is_some_and(|n| n > 0),
            "{row}"
        );
    }
    assert_eq!(leftover_groups("lab.soak", pid), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A request lost (or read twice) on purpose (the first one a server reads) fails the command,
/// and the final line counts it.
#[test]
fn soak_fails_when_a_request_is_lost_or_duplicated() {
    for (fault, lost, duplicated) in [("lose", 1, 0), ("duplicate", 0, 1)] {
        let mut command = Command::new(herd());
        command
            .args(["soak", "--backend", "native", "--minutes", "0.05"])
            .args(["--servers", "3", "--queues", "2", "--rate", "100"])
            .args(["--inject", fault]);
        let (ok, stdout, stderr, pid) = run_with_pid(command);
        assert!(!ok, "--inject {fault}: the command fails");
        let last = stdout.lines().last().unwrap_or_default();
        let (l, d, _) = soak_counts(last, "native");
        assert!(l >= lost && d >= duplicated, "--inject {fault}: {last}");
        assert!(stdout.contains("INJECTED FAULT"), "{stdout}");
        assert!(stderr.contains("soak: failed on native"), "{stderr}");
        assert_eq!(leftover_groups("lab.soak", pid), Vec::<String>::new());
    }
}

#[test]
fn soak_settings_are_checked_before_it_runs() {
    refused(&["soak", "--minutes", "0"], "--minutes", "0.05", false);
    refused(
        &["soak", "--servers", "2", "--queues", "2"],
        "--servers",
        "--queues + 1",
        false,
    );
}

/// `herd rpc`, short: 500 calls to 8 servers, the raw flag and herdless on both backends,
/// forked and exec'd servers. Every call got exactly one reply (the command checks each reply
/// against its call and fails otherwise; here: exit 0, and the servers' counts add up to the
/// calls in every JSON row), the table has a row per mode, the verdict a line per herdless
/// mode, and neither the queues nor the named groups outlive the run.
#[test]
fn rpc_answers_every_call_once_on_both_backends() {
    let dir = scratch("rpc");
    for spawn in ["fork", "exec"] {
        let json = dir.join(format!("rpc-{spawn}.json"));
        let mut command = Command::new(herd());
        command
            .args(["rpc", "--calls", "500", "--servers", "8", "--spawn", spawn])
            .args(["--modes", "raw-flag,herdless-native,herdless-emulated"])
            .arg("--json")
            .arg(&json);
        let (ok, stdout, stderr, pid) = run_with_pid(command);
        assert!(ok, "--spawn {spawn}: {stderr}");
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let rows = file.as_array().expect("rows");
        let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
        assert_eq!(
            modes,
            ["raw flag", "herdless native", "herdless emulated"],
            "{file}"
        );
        for row in rows {
            assert_eq!(row["calls"], 500, "{row}");
            assert_eq!(row["error"], serde_json::Value::Null, "{row}");
            let served: u64 = row["per_server"]
                .as_array()
                .expect("per_server")
                .iter()
                .map(|n| n.as_u64().unwrap())
                .sum();
            assert_eq!(served, 500, "every call answered once: {row}");
            assert!(row["time_vs_raw_flag"].as_f64().is_some(), "{row}");
        }
        for mode in ["herdless native", "herdless emulated"] {
            let verdict = format!(
                "- {mode}{} at 8 servers: ",
                if spawn == "exec" { " (exec)" } else { "" }
            );
            assert!(stdout.contains(&verdict), "{verdict}: {stdout}");
        }
        let queues: Vec<String> = std::fs::read_dir("/dev/mqueue")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&format!("herdless-rpc-{pid}-")))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(queues, Vec::<String>::new(), "the queues are unlinked");
        assert_eq!(leftover_groups("lab.herd", pid), Vec::<String>::new());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rpc_settings_are_checked_before_it_runs() {
    refused(&["rpc", "--servers", "0"], "--servers", "16384", false);
    refused(&["rpc", "--calls", "0"], "--calls", "1 call", false);
}

/// `herd ring` hands every message to the next thread in order: 300 messages over 3 threads
/// are 100 each (Jain 1), in every row it ran (where the scheduler puts the threads, and
/// pinned where the process may use two CPUs).
#[test]
fn the_ring_hands_every_message_on_in_turn() {
    let out = Command::new(herd())
        .args(["ring", "--waiters", "3", "--messages", "300"])
        .output()
        .expect("the herd example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| 3 |")).collect();
    assert!(!rows.is_empty(), "{stdout}");
    for row in rows {
        assert!(row.contains("| 300 |"), "every message read: {row}");
        assert!(row.ends_with("| 1.0000 |"), "100 each: {row}");
    }
}

#[test]
fn a_ring_of_no_thread_is_refused() {
    let out = Command::new(herd())
        .args(["ring", "--waiters", "0"])
        .output()
        .expect("the herd example runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--waiters 0") && stderr.contains("16384"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// `herd bare` reads every message exactly once, with the raw flag and with an entry rotated
/// after every message, on a pipe and on a message queue: 2 000 messages over 4 threads, each
/// row's count the producer's.
#[test]
fn bare_epoll_reads_every_message_with_and_without_rotation() {
    let out = Command::new(herd())
        .args([
            "bare",
            "--workload",
            "pipe,mq",
            "--waiters",
            "4",
            "--messages",
            "2000",
        ])
        .output()
        .expect("the herd example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains(" | 4 | ")).collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    for (row, start) in rows.iter().zip([
        "| pipe | 4 | epoll | never (raw flag) | 2000 |",
        "| pipe | 4 | epoll | 1 | 2000 |",
        "| mq | 4 | epoll | never (raw flag) | 2000 |",
        "| mq | 4 | epoll | 1 | 2000 |",
    ]) {
        assert!(row.starts_with(start), "{start}: {stdout}");
    }
}

/// `herd bare --wait uring,uring-in-epoll` reads every message exactly once through io_uring's
/// one-shot exclusive poll, armed again after each message, waited on in the ring and in an
/// epoll instance holding the ring, on a pipe and on a message queue. Skipped, loudly, where
/// io_uring is not allowed (`kernel.io_uring_disabled`, a container's seccomp filter).
#[test]
fn bare_uring_reads_every_message() {
    let out = Command::new(herd())
        .args([
            "bare",
            "--workload",
            "pipe,mq",
            "--waiters",
            "4",
            "--messages",
            "2000",
            "--wait",
            "uring,uring-in-epoll",
            "--rotate-every",
            "1",
        ])
        .output()
        .expect("the herd example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("io_uring unavailable here") {
        eprintln!("SKIPPED bare_uring_reads_every_message: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stdout}{stderr}");
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains(" | 4 | ")).collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    for (row, start) in rows.iter().zip([
        "| pipe | 4 | io_uring | 1 (re-armed) | 2000 |",
        "| pipe | 4 | io_uring in epoll | 1 (re-armed) | 2000 |",
        "| mq | 4 | io_uring | 1 (re-armed) | 2000 |",
        "| mq | 4 | io_uring in epoll | 1 (re-armed) | 2000 |",
    ]) {
        assert!(row.starts_with(start), "{start}: {stdout}");
    }
}

#[test]
fn bare_epoll_refuses_bad_counts() {
    for args in [
        &["bare", "--waiters", "0"][..],
        &["bare", "--messages", "0"][..],
        &["bare", "--wait", "uring", "--rotate-every", "0"][..],
    ] {
        let out = Command::new(herd())
            .args(args)
            .output()
            .expect("the herd example runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.contains("--waiters 0")
                || stderr.contains("--messages")
                || stderr.contains("--wait uring re-arms its poll after every message"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// `herd bare` counts its descriptors before it starts a thread: 100 threads need about 364,
/// and a process whose open-file limit is 256 (soft and hard) is refused in one line.
#[test]
fn bare_epoll_beyond_the_open_file_limit_is_refused() {
    let out = herd_with_limit(libc::RLIMIT_NOFILE, 256)
        .args(["bare", "--waiters", "100", "--messages", "1000"])
        .output()
        .expect("the herd example runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("--waiters 100") && lines[0].contains("open-file limit of 256"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}
