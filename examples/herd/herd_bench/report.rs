//! The herd benchmark's output: the comparison table (markdown, on stdout), every row as JSON,
//! and a chart (SVG, drawn with plotters) of time and kernel wake-ups per message by mode and of
//! who got what.
//!
//! Figures are normalised per message, so a row that ran fewer messages (no flag's herd at 500
//! waiters is capped) stays comparable; the table marks such rows. With `--runs`, each figure is
//! the mean with min–max over the runs.

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use super::run::{Measured, Mode, Refusal, Rotate, RowSpec, Setup};
use super::Workload;
use crate::exec::Spawn;
use crate::fairness::{sketch, Distribution, Spread};

/// One row as it ran.
pub struct Outcome {
    pub run: u64,
    pub spec: RowSpec,
    pub result: Result<Measured, Refusal>,
}

/// One measured row, as the JSON file has it.
#[derive(Serialize)]
struct JsonRow {
    workload: &'static str,
    #[serde(flatten)]
    mode: Setup,
    waiters: usize,
    run: u64,
    processes: bool,
    work_us: u64,
    messages: u64,
    requested_messages: u64,
    stopped_by_time_cap: bool,
    seconds: f64,
    messages_per_second: f64,
    kernel_wakeups: u64,
    kernel_wakeups_per_message: f64,
    /// Reads that found nothing (`EAGAIN`), as the members counted them.
    empty_wakeups: u64,
    empty_wakeups_per_message: f64,
    /// The same window's empty wake-ups as the library counted them
    /// (`MemberStats::empty_wakeups`; the members call `found_nothing` after each `EAGAIN`);
    /// null for no flag, which does not use herdless.
    library_empty_wakeups: Option<u64>,
    library_empty_wakeups_per_message: Option<f64>,
    /// CPU time (user + system) of all waiters over the window of the kernel wake-ups.
    cpu_seconds: f64,
    cpu_us_per_message: f64,
    /// µs per message ÷ the same mode's at the smallest waiter count of this run (T500/T1 in a
    /// run of `--waiters 1,500`); null on the smallest count's own row.
    time_vs_fewest_waiters: Option<f64>,
    /// CPU µs per message ÷ the same mode's at the smallest waiter count of this run.
    cpu_vs_fewest_waiters: Option<f64>,
    distribution: Distribution,
    per_waiter: Vec<u64>,
    mq_depth: Option<i64>,
}

/// A row with no figures, and why: the mode does not exist here, or (available) it failed.
#[derive(Serialize)]
struct Missing {
    workload: &'static str,
    #[serde(flatten)]
    mode: Setup,
    waiters: usize,
    run: u64,
    available: bool,
    reason: String,
}

/// One (workload, mode, waiters) line of the table: its runs together.
struct Line {
    workload: Workload,
    mode: Setup,
    waiters: usize,
    runs: Vec<Measured>,
}

impl Line {
    fn spread(&self, figure: impl Fn(&Measured) -> f64) -> Spread {
        Spread::of(&self.runs.iter().map(figure).collect::<Vec<_>>())
    }
    fn us_per_message(&self) -> Spread {
        self.spread(|m| m.seconds * 1e6 / m.messages as f64)
    }
    fn kernel_per_message(&self) -> Spread {
        self.spread(|m| m.kernel_wakeups as f64 / m.messages as f64)
    }
    /// CPU µs (user + system, all waiters) per message.
    fn cpu_per_message(&self) -> Spread {
        self.spread(|m| m.cpu_seconds * 1e6 / m.messages as f64)
    }
    fn jain(&self) -> Spread {
        self.spread(|m| Distribution::of(&m.per_waiter).jain)
    }
}

#[derive(Serialize)]
struct JsonFile<'a> {
    processes: bool,
    work_us: u64,
    /// Each row ran right after the previous one in the same process.
    warm: bool,
    rows: &'a [JsonRow],
    missing: &'a [Missing],
}

/// Everything one comparison measured.
pub struct Report {
    processes: bool,
    /// Print every column (`--wide`).
    wide: bool,
    work_us: u64,
    requested: u64,
    rows: Vec<JsonRow>,
    missing: Vec<Missing>,
    lines: Vec<Line>,
}

impl Report {
    pub fn new(
        outcomes: Vec<Outcome>,
        requested: u64,
        processes: bool,
        work_us: u64,
        wide: bool,
    ) -> Report {
        let mut report = Report {
            processes,
            wide,
            work_us,
            requested,
            rows: Vec::new(),
            missing: Vec::new(),
            lines: Vec::new(),
        };
        for Outcome { run, spec, result } in outcomes {
            let workload = spec.workload.name();
            match result {
                Ok(m) => {
                    let n = m.messages as f64;
                    report.rows.push(JsonRow {
                        workload,
                        mode: spec.setup(),
                        waiters: spec.waiters,
                        run,
                        processes,
                        work_us,
                        messages: m.messages,
                        requested_messages: spec.messages,
                        stopped_by_time_cap: m.stopped_by_time_cap,
                        seconds: m.seconds,
                        messages_per_second: n / m.seconds,
                        kernel_wakeups: m.kernel_wakeups,
                        kernel_wakeups_per_message: m.kernel_wakeups as f64 / n,
                        empty_wakeups: m.empty_wakeups,
                        empty_wakeups_per_message: m.empty_wakeups as f64 / n,
                        library_empty_wakeups: m.library_empty_wakeups,
                        library_empty_wakeups_per_message: m
                            .library_empty_wakeups
                            .map(|e| e as f64 / n),
                        cpu_seconds: m.cpu_seconds,
                        cpu_us_per_message: m.cpu_seconds * 1e6 / n,
                        time_vs_fewest_waiters: None,
                        cpu_vs_fewest_waiters: None,
                        distribution: Distribution::of(&m.per_waiter),
                        per_waiter: m.per_waiter.clone(),
                        mq_depth: m.mq_depth,
                    });
                    let same = |l: &&mut Line| {
                        l.workload == spec.workload
                            && l.mode == spec.setup()
                            && l.waiters == spec.waiters
                    };
                    match report.lines.iter_mut().find(same) {
                        Some(line) => line.runs.push(m),
                        None => report.lines.push(Line {
                            workload: spec.workload,
                            mode: spec.setup(),
                            waiters: spec.waiters,
                            runs: vec![m],
                        }),
                    }
                }
                Err(refusal) => {
                    let (available, reason) = match refusal {
                        Refusal::Unavailable(r) => (false, r),
                        Refusal::Failed(r) => (true, r),
                    };
                    report.missing.push(Missing {
                        workload,
                        mode: spec.setup(),
                        waiters: spec.waiters,
                        run,
                        available,
                        reason,
                    });
                }
            }
        }
        report.relate_to_fewest_waiters();
        report
    }

    /// Fills each row's ratios to the row of the same workload, mode and run at the smallest
    /// waiter count.
    fn relate_to_fewest_waiters(&mut self) {
        let ratios: Vec<Option<(f64, f64)>> = self
            .rows
            .iter()
            .map(|row| {
                let base = self
                    .rows
                    .iter()
                    .filter(|b| {
                        b.workload == row.workload && b.mode == row.mode && b.run == row.run
                    })
                    .min_by_key(|b| b.waiters)
                    .filter(|b| b.waiters < row.waiters)?;
                let time = |r: &JsonRow| r.seconds / r.messages as f64;
                Some((
                    time(row) / time(base),
                    row.cpu_us_per_message / base.cpu_us_per_message,
                ))
            })
            .collect();
        for (row, ratio) in self.rows.iter_mut().zip(ratios) {
            row.time_vs_fewest_waiters = ratio.map(|r| r.0);
            row.cpu_vs_fewest_waiters = ratio.map(|r| r.1);
        }
    }

    /// Rows that ran and were measured.
    pub fn measured_rows(&self) -> usize {
        self.rows.len()
    }

    /// Rows that did not run: not available here, or failed.
    pub fn missing_rows(&self) -> usize {
        self.missing.len()
    }

    /// The figure of the smallest waiter count of the same workload and mode.
    fn baseline(&self, line: &Line) -> Option<&Line> {
        self.lines
            .iter()
            .filter(|l| l.workload == line.workload && l.mode == line.mode)
            .min_by_key(|l| l.waiters)
            .filter(|l| l.waiters < line.waiters)
    }

    pub fn print_table(&self) {
        let waiters_kind = if self.processes {
            "processes"
        } else {
            "threads"
        };
        println!(
            "\n## herd: one producer, W waiters ({waiters_kind}), one 8-byte message per \
             wake-up, work {} µs/message (warm runs)\n",
            self.work_us
        );
        let header = [
            "workload",
            "mode",
            "W",
            "messages",
            "seconds",
            "msg/s",
            "µs/msg",
            "CPU µs/msg",
            "kernel wake-ups/msg",
            "EAGAIN/msg",
            "stats() empty/msg",
            "max share",
            "max−min",
            "Jain",
            "time ÷ fewest W",
            "CPU ÷ fewest W",
        ];
        let header = header.as_slice();
        let mut table: Vec<Vec<String>> = Vec::new();
        let (mut capped, mut timed) = (false, false);
        for line in &self.lines {
            let fewer = line.runs.iter().any(|m| m.messages < self.requested);
            let by_time = line.runs.iter().any(|m| m.stopped_by_time_cap);
            capped |= fewer && !by_time;
            timed |= by_time;
            let messages = line.runs.iter().map(|m| m.messages).min().unwrap_or(0);
            let mark = match (by_time, fewer) {
                (true, _) => " †",
                (false, true) => " *",
                _ => "",
            };
            let dist: Vec<Distribution> = line
                .runs
                .iter()
                .map(|m| Distribution::of(&m.per_waiter))
                .collect();
            let of = |f: &dyn Fn(&Distribution) -> f64| {
                Spread::of(&dist.iter().map(f).collect::<Vec<_>>())
            };
            let base = self.baseline(line);
            let ratio = |figure: fn(&Line) -> Spread| {
                base.map_or(String::from("—"), |base| {
                    format!("× {:.2}", figure(line).mean / figure(base).mean)
                })
            };
            table.push(vec![
                line.workload.name().to_string(),
                // The narrow table has no messages column: the mark goes with the mode.
                match self.wide {
                    true => line.mode.name().to_string(),
                    false => format!("{}{mark}", line.mode.name()),
                },
                line.waiters.to_string(),
                format!("{messages}{mark}"),
                show(line.spread(|m| m.seconds), 2),
                show(line.spread(|m| m.messages as f64 / m.seconds), 0),
                show(line.us_per_message(), 2),
                show(line.cpu_per_message(), 2),
                show(line.kernel_per_message(), 2),
                show(
                    line.spread(|m| m.empty_wakeups as f64 / m.messages as f64),
                    3,
                ),
                match line.runs.iter().all(|m| m.library_empty_wakeups.is_some()) {
                    true => show(
                        line.spread(|m| {
                            m.library_empty_wakeups.unwrap_or(0) as f64 / m.messages as f64
                        }),
                        3,
                    ),
                    false => "—".to_string(),
                },
                show(of(&|d| d.max_share), 3),
                show(of(&|d| d.spread as f64), 0),
                show(of(&|d| d.jain), 3),
                ratio(Line::us_per_message),
                ratio(Line::cpu_per_message),
            ]);
        }
        for m in &self.missing {
            let what = if m.available {
                format!("FAILED: {}", m.reason)
            } else {
                format!("not available: {} (DID NOT RUN)", m.reason)
            };
            let mut row = vec![
                m.workload.to_string(),
                m.mode.name().to_string(),
                m.waiters.to_string(),
                what,
            ];
            row.resize(header.len(), String::new());
            table.push(row);
        }
        // The default table keeps what tells the story; --wide adds the raw counts.
        const WIDE_ONLY: [&str; 4] = ["messages", "seconds", "msg/s", "max−min"];
        let keep: Vec<usize> = (0..header.len())
            .filter(|&i| self.wide || !WIDE_ONLY.contains(&header[i]))
            .collect();
        let header: Vec<&str> = keep.iter().map(|&i| header[i]).collect();
        let table: Vec<Vec<String>> = table
            .into_iter()
            .map(
                |row| match row[3].starts_with("not available") || row[3].starts_with("FAILED") {
                    // A row that did not run keeps its reason in the fourth cell.
                    true => {
                        let mut r: Vec<String> = row[..3].to_vec();
                        r.push(row[3].clone());
                        r.resize(header.len(), String::new());
                        r
                    }
                    false => keep.iter().map(|&i| row[i].clone()).collect(),
                },
            )
            .collect();
        print_markdown(&header, &table);
        self.print_legend();
        if !self.wide {
            println!("\n(--wide adds messages, seconds, msg/s and max−min.)");
        }
        if capped {
            println!("\n\\* fewer messages than asked (--plain-cap): the herd makes each one cost hundreds of wake-ups; figures are per message.");
        }
        if timed {
            println!(
                "\n† the producer stopped at the time cap (--time-cap); figures are per message."
            );
        }
        let depths: Vec<i64> = self.rows.iter().filter_map(|r| r.mq_depth).collect();
        if let Some(depth) = depths.first() {
            println!("\nmq: queue depth (mq_maxmsg) {depth}, message size 8 bytes.");
        }
        println!(
            "\nKernel wake-ups: voluntary context switches of the waiters (RUSAGE_THREAD per \
             waiter thread, per child process with --processes), from each waiter's start to \
             its first wake-up after the last message was read. EAGAIN: reads that found \
             nothing, as the waiters counted them; stats() empty: the same window's empty \
             wake-ups as herdless counted them (MemberStats::empty_wakeups: each EAGAIN \
             reported with Waiter::found_nothing, plus, under the emulation, wake-ups its \
             token passing absorbed before they reached the waiter; — for no flag, which does \
             not use herdless). CPU: user + system time of all the waiters (RUSAGE_THREAD per \
             waiter thread or child process) over the same window, per message; the \
             producer's is not counted. Time: first write to last read, all waiters asleep at \
             the start. Time (CPU) ÷ fewest W: µs (CPU µs) per message ÷ the same mode's at \
             the smallest waiter count of the run (T500/T1 in a run of --waiters 1,500)."
        );
        println!("\n### Per-waiter messages (first run)\n");
        for line in &self.lines {
            println!(
                "- {} {} W={}: {}",
                line.workload.name(),
                line.mode.name(),
                line.waiters,
                sketch(&line.runs[0].per_waiter)
            );
        }
    }

    /// The modes of the table, one line each: what the name stands for.
    fn print_legend(&self) {
        let mut modes: Vec<Mode> = Vec::new();
        for line in &self.lines {
            if !modes.contains(&line.mode.mode) {
                modes.push(line.mode.mode);
            }
        }
        for m in &self.missing {
            if !modes.contains(&m.mode.mode) {
                modes.push(m.mode.mode);
            }
        }
        println!("\nModes:");
        for mode in modes {
            println!("- {}: {}", mode.name(), mode.meaning());
        }
        let strict = self
            .lines
            .iter()
            .any(|l| !matches!(l.mode.rotate_every, None | Some(Rotate::Adaptive)));
        if strict {
            println!(
                "- herdless …/N: the same with `rotate_every(N)` instead of the default \
                 (`--rotate-every N`; 1: strict turns, 0: never rotate)"
            );
        }
        if self.lines.iter().any(|l| l.mode.spawn == Some(Spawn::Exec)) {
            println!("- … (exec): waiter processes forked, then exec'd (the lab itself)");
        }
    }

    /// A few lines computed from this run's means: what the herd cost at the largest waiter
    /// count against the smallest, what herdless saved against no flag there, and native
    /// against emulated; time and CPU per message. Lines whose rows did not run are left out.
    pub fn verdict(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut workloads: Vec<Workload> = self.lines.iter().map(|l| l.workload).collect();
        workloads.dedup();
        for workload in workloads {
            let lines: Vec<&Line> = self
                .lines
                .iter()
                .filter(|l| l.workload == workload)
                .collect();
            let (Some(low), Some(high)) = (
                lines.iter().map(|l| l.waiters).min(),
                lines.iter().map(|l| l.waiters).max(),
            ) else {
                continue;
            };
            // The line of `mode` at `waiters`: under the default rotation if it ran, else the
            // first one that did; the same spawn as the first line of the workload.
            let spawn = lines[0].mode.spawn;
            let find = |mode: Mode, waiters: usize| -> Option<&Line> {
                let of: Vec<&Line> = lines
                    .iter()
                    .copied()
                    .filter(|l| {
                        l.mode.mode == mode && l.waiters == waiters && l.mode.spawn == spawn
                    })
                    .collect();
                of.iter()
                    .copied()
                    .find(|l| matches!(l.mode.rotate_every, None | Some(Rotate::Adaptive)))
                    .or_else(|| of.first().copied())
            };
            let time = |l: &Line| l.us_per_message().mean;
            let cpu = |l: &Line| l.cpu_per_message().mean;
            let name = workload.name();
            if let (true, Some(one), Some(many)) =
                (low < high, find(Mode::Plain, low), find(Mode::Plain, high))
            {
                out.push(format!(
                    "{name}, the herd: with no flag, {high} waiters took {} µs and {} µs of CPU \
                     per message, {low} {} {} and {} ({} the time, {} the CPU; {} \
                     kernel wake-ups per message).",
                    fig(time(many)),
                    fig(cpu(many)),
                    if low == 1 { "waiter" } else { "waiters" },
                    fig(time(one)),
                    fig(cpu(one)),
                    times(time(many), time(one)),
                    times(cpu(many), cpu(one)),
                    fig(many.kernel_per_message().mean),
                ));
            }
            let plain = find(Mode::Plain, high);
            let native = find(Mode::NativeRr, high);
            let emulated = find(Mode::EmulatedRr, high);
            let raw = find(Mode::NativeExclusive, high);
            if let (true, Some(one), Some(many)) =
                (low < high, find(Mode::NativeExclusive, low), raw)
            {
                out.push(format!(
                    "{name}, {} at W={high}: {} µs and {} µs of CPU per message; against itself \
                     at W={low} (T{high}/T{low}) {} the time and {} the CPU.",
                    many.mode.name(),
                    fig(time(many)),
                    fig(cpu(many)),
                    times(time(many), time(one)),
                    times(cpu(many), cpu(one)),
                ));
            }
            for herdless in [native, emulated].into_iter().flatten() {
                let mut said = Vec::new();
                if let Some(plain) = plain {
                    said.push(format!(
                        "against no flag {} the time and {} the CPU",
                        times(time(herdless), time(plain)),
                        times(cpu(herdless), cpu(plain)),
                    ));
                }
                if let Some(raw) = raw {
                    said.push(format!(
                        "against the raw flag {} the time, {} the CPU, Jain {:.3} against {:.3}",
                        times(time(herdless), time(raw)),
                        times(cpu(herdless), cpu(raw)),
                        herdless.jain().mean,
                        raw.jain().mean,
                    ));
                }
                if let (true, Some(one)) = (low < high, find(herdless.mode.mode, low)) {
                    said.push(format!(
                        "against itself at W={low} (T{high}/T{low}) {} the time and {} the CPU",
                        times(time(herdless), time(one)),
                        times(cpu(herdless), cpu(one)),
                    ));
                }
                if said.is_empty() {
                    continue;
                }
                out.push(format!(
                    "{name}, {} at W={high}: {} µs and {} µs of CPU per message; {}.",
                    herdless.mode.name(),
                    fig(time(herdless)),
                    fig(cpu(herdless)),
                    said.join("; "),
                ));
            }
            if let (Some(native), Some(emulated)) = (native, emulated) {
                out.push(format!(
                    "{name}, native against emulated at W={high}: {} {} the time and {} the \
                     CPU of {} ({} against {} µs of CPU per message).",
                    emulated.mode.name(),
                    times(time(emulated), time(native)),
                    times(cpu(emulated), cpu(native)),
                    native.mode.name(),
                    fig(cpu(emulated)),
                    fig(cpu(native)),
                ));
            }
        }
        out
    }

    /// Prints the verdict (`verdict`), if the run had anything to compare.
    pub fn print_verdict(&self) {
        let lines = self.verdict();
        if lines.is_empty() {
            return;
        }
        println!("\n### Verdict (this run, means)\n");
        for line in lines {
            println!("- {line}");
        }
    }

    /// Writes every row as JSON to `path` (checked before the first row ran: `check_output`).
    pub fn write_json(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let file = JsonFile {
            processes: self.processes,
            work_us: self.work_us,
            warm: true,
            rows: &self.rows,
            missing: &self.missing,
        };
        std::fs::write(path, serde_json::to_string_pretty(&file)?)
            .map_err(|e| format!("--json {}: cannot be written: {e}", path.display()))?;
        Ok(())
    }

    /// Per workload, read left to right: what the herd costs the kernel (wake-ups per message),
    /// what each mode costs in time (µs per message), and what that time buys (each waiter's
    /// share at the largest waiter count). Bars per mode, one per waiter count, log scale;
    /// modes named for what they are (no flag, the raw flag, herdless); a figure below the
    /// axis floor is drawn as no bar with its value written at the floor.
    pub fn write_svg(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        self.draw_svg(path)
            .map_err(|e| format!("--svg {}: cannot be written: {e}", path.display()).into())
    }

    fn draw_svg(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let mut workloads: Vec<Workload> = self.lines.iter().map(|l| l.workload).collect();
        workloads.dedup();
        let mut modes: Vec<Setup> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        for line in &self.lines {
            if !modes.contains(&line.mode) {
                modes.push(line.mode);
            }
            if !counts.contains(&line.waiters) {
                counts.push(line.waiters);
            }
        }
        counts.sort_unstable();
        let height = 800 * workloads.len().max(1) as u32 + 60;
        let root = SVGBackend::new(path, (1600, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!(
            "herd: 1 producer, W waiters ({}), work {} µs/message — no flag, the raw flag \
             (EPOLLEXCLUSIVE), and herdless",
            if self.processes {
                "processes"
            } else {
                "threads"
            },
            self.work_us
        );
        let body = root.titled(&title, ("sans-serif", 22))?;
        // Per workload two rows of two panels: wake-ups and time, then CPU and shares.
        let panels = body.split_evenly((workloads.len().max(1) * 2, 2));
        let largest = counts.last().copied().unwrap_or(1);
        for (w, &workload) in workloads.iter().enumerate() {
            let lines: Vec<&Line> = self
                .lines
                .iter()
                .filter(|l| l.workload == workload)
                .collect();
            let name = workload.name();
            bars(
                &panels[w * 4],
                &format!("{name}: the herd — kernel wake-ups per message"),
                "kernel wake-ups per message (log)",
                &lines,
                &modes,
                &counts,
                |l| l.kernel_per_message().mean,
            )?;
            bars(
                &panels[w * 4 + 1],
                &format!("{name}: the price — µs per message (buys the shares →)"),
                "µs per message (log)",
                &lines,
                &modes,
                &counts,
                |l| l.us_per_message().mean,
            )?;
            bars(
                &panels[w * 4 + 2],
                &format!("{name}: the CPU — µs of waiters' CPU (user + system) per message"),
                "CPU µs per message (log)",
                &lines,
                &modes,
                &counts,
                |l| l.cpu_per_message().mean,
            )?;
            distribution(&panels[w * 4 + 3], name, &lines, &modes, largest)?;
        }
        root.present()?;
        Ok(())
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// The colour of the bars of the i-th waiter count.
fn count_colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 4] = [
        RGBColor(0x9e, 0xc5, 0xe8),
        RGBColor(0x1f, 0x4e, 0x8c),
        RGBColor(0xf2, 0xa1, 0x4b),
        RGBColor(0x6b, 0x3f, 0x99),
    ];
    COLOURS[i % COLOURS.len()]
}

fn mode_colour(setup: Setup) -> RGBColor {
    let strict = !matches!(setup.rotate_every, None | Some(Rotate::Adaptive));
    match (setup.mode, strict) {
        (Mode::Plain, _) => RGBColor(0x80, 0x80, 0x80),
        (Mode::NativeExclusive, _) => RGBColor(0xd6, 0x27, 0x28),
        (Mode::NativeRr, false) => RGBColor(0x1f, 0x77, 0xb4),
        (Mode::NativeRr, true) => RGBColor(0x9e, 0xc9, 0xe6),
        (Mode::EmulatedRr, false) => RGBColor(0x2c, 0xa0, 0x2c),
        (Mode::EmulatedRr, true) => RGBColor(0x9f, 0xd8, 0x9f),
    }
}

/// The rotation a herdless line ran under, in words: "" for the default.
fn rotation_words(setup: Setup) -> String {
    match setup.rotate_every {
        None | Some(Rotate::Adaptive) => String::new(),
        Some(Rotate::Every(1)) => " (strict turns)".into(),
        Some(Rotate::Every(0)) => " (no rotation)".into(),
        Some(Rotate::Every(n)) => format!(" (turns of {n})"),
    }
}

/// The chart's legend entry for a mode: its name, as in the table, and its rotation in words.
fn legend_name(setup: Setup) -> String {
    format!("{}{}", setup.name(), rotation_words(setup))
}

/// The lowest value a log axis of the bar panels shows: below it a figure is "none" at this
/// scale (a single waiter that never sleeps has 0 kernel wake-ups per message).
const BAR_FLOOR: f64 = 0.01;

/// Grouped bars: one group per mode, one bar per waiter count, log scale. A figure below the
/// floor gets no bar, only its value written at the floor.
fn bars(
    area: &Area<'_>,
    caption: &str,
    y_title: &str,
    lines: &[&Line],
    modes: &[Setup],
    counts: &[usize],
    figure: impl Fn(&Line) -> f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let values: Vec<f64> = lines
        .iter()
        .map(|l| figure(l))
        .filter(|v| *v >= BAR_FLOOR)
        .collect();
    let smallest = values.iter().copied().fold(f64::INFINITY, f64::min);
    let low = (smallest.min(1.0) / 2.0).max(BAR_FLOOR);
    let high = values.iter().copied().fold(1.0, f64::max) * 3.0;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..modes.len() as f64 - 0.5, (low..high).log_scale())?;
    let names: Vec<String> = modes.iter().map(|&m| m.name()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(modes.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 12))
        .y_label_formatter(&|y| format!("{y}"))
        .y_desc(y_title)
        .x_desc("a value with no bar is below the axis")
        .axis_desc_style(("sans-serif", 13))
        .draw()?;
    let width = 0.8 / counts.len().max(1) as f64;
    for (c, &count) in counts.iter().enumerate() {
        let colour = count_colour(c);
        let rects: Vec<Rectangle<(f64, f64)>> = lines
            .iter()
            .filter(|l| l.waiters == count && figure(l) >= low)
            .filter_map(|l| {
                let m = modes.iter().position(|&m| m == l.mode)? as f64;
                let x0 = m - 0.4 + c as f64 * width;
                Some(Rectangle::new(
                    [(x0, low), (x0 + width * 0.9, figure(l))],
                    colour.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(format!("W={count}"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    let labels: Vec<Text<(f64, f64), String>> = lines
        .iter()
        .filter_map(|l| {
            let m = modes.iter().position(|&m| m == l.mode)? as f64;
            let c = counts.iter().position(|&c| c == l.waiters)? as f64;
            let x = m - 0.4 + c * width + width * 0.45;
            let v = figure(l);
            // Below the axis: no bar, the value itself on the floor ("0" when it rounds to 0).
            let text = if v >= low || v >= 0.005 {
                short(v)
            } else {
                String::from("0")
            };
            Some(Text::new(
                text,
                (x, v.max(low) * 1.15),
                ("sans-serif", 11).into_font().color(&BLACK).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Bottom,
                    ),
                ),
            ))
        })
        .collect();
    chart.draw_series(labels)?;
    draw_legend(&mut chart)
}

/// Messages per waiter, sorted from the busiest, as a multiple of the fair share, at the
/// largest waiter count: flat at 1 is fair, a cliff is a monopoly. Waiters that got nothing are
/// drawn on a labelled floor line, "0 messages".
fn distribution(
    area: &Area<'_>,
    workload: &str,
    lines: &[&Line],
    modes: &[Setup],
    waiters: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let floor = 0.01;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{workload}: what it buys — each waiter's share, W={waiters}"),
            ("sans-serif", 17),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(
            0f64..waiters.max(2) as f64,
            (floor * 0.5..waiters.max(2) as f64 * 4.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("waiters, busiest first")
        .y_desc("messages ÷ fair share (log; 1 = fair)")
        .axis_desc_style(("sans-serif", 13))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    // The floor: where a waiter with no message at all is drawn, said in words.
    let grey = RGBColor(0x60, 0x60, 0x60);
    chart.draw_series(DashedLineSeries::new(
        [(0.0, floor), (waiters.max(2) as f64, floor)],
        4,
        3,
        grey.stroke_width(1),
    ))?;
    chart.draw_series([Text::new(
        String::from("0 messages (none) drawn here"),
        (waiters.max(2) as f64 * 0.98, floor * 1.25),
        ("sans-serif", 11)
            .into_font()
            .color(&grey)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Right,
                plotters::style::text_anchor::VPos::Bottom,
            )),
    )])?;
    for &mode in modes {
        let Some(line) = lines
            .iter()
            .find(|l| l.mode == mode && l.waiters == waiters)
        else {
            continue;
        };
        let mut per = line.runs[0].per_waiter.clone();
        per.sort_unstable_by(|a, b| b.cmp(a));
        let fair = line.runs[0].messages as f64 / waiters as f64;
        let colour = mode_colour(mode);
        chart
            .draw_series(LineSeries::new(
                per.iter()
                    .enumerate()
                    .map(|(i, &c)| (i as f64, (c as f64 / fair).max(floor))),
                colour.stroke_width(2),
            ))?
            .label(legend_name(mode))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
            });
    }
    draw_legend(&mut chart)
}

/// A figure of the verdict: about three significant digits.
fn fig(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `a` as a multiple of `b`: "× 4.20", "× 0.006"; "× ?" when `b` is 0.
fn times(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("× {}", fig(a / b))
    } else {
        String::from("× ?")
    }
}

/// A bar's value in a few characters.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A figure with `digits` decimals, and its min–max over runs when they differ.
fn show(s: Spread, digits: usize) -> String {
    if (s.max - s.min).abs() < f64::EPSILON * s.max.abs().max(1.0) {
        format!("{:.digits$}", s.mean)
    } else {
        format!(
            "{:.digits$} ({:.digits$}–{:.digits$})",
            s.mean, s.min, s.max
        )
    }
}

fn print_markdown(header: &[&str], rows: &[Vec<String>]) {
    let width = |i: usize| {
        rows.iter()
            .filter(|r| !r[i].starts_with("not available") && !r[i].starts_with("FAILED"))
            .map(|r| r[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| format!("{c:<w$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header.to_vec());
    line(
        widths
            .iter()
            .map(|&w| "-".repeat(w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
    );
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// The legend every chart of the report uses: top right, boxed, over a light background.
fn draw_legend<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    Ok(())
}
