//! Per-CPU dispatch on a host kernel: which CPUs there are and what they are for
//! (/sys/devices/system/cpu: online, isolated, nohz_full), steering one interrupt to one CPU
//! (/proc/irq/N/smp_affinity_list), where the kernel really dispatches it
//! (/proc/irq/N/effective_affinity_list), and the per-CPU counts of /proc/interrupts that
//! check the steering over a run.
//!
//! ```text
//!  vector v_c ─ vector_host_irq ─► irq N ─ write "c" ─► /proc/irq/N/smp_affinity_list
//!  /proc/interrupts before ─┐
//!  /proc/interrupts after  ─┴─► counts of N per CPU grew on c and only there?  (SteeringCheck)
//! ```
//!
//! Everything takes the root directory (`/proc`, `/sys/devices/system/cpu`) so the tests run
//! on fixtures; the parsers never panic on a listing they do not know, they leave it out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::trace::parse_cpu_list;

/// Where the kernel lists its CPUs' roles.
pub const SYS_CPU: &str = "/sys/devices/system/cpu";
/// Where the kernel's per-interrupt files are.
pub const PROC: &str = "/proc";

/// A kernel CPU list that may be empty (`isolated` and `nohz_full` are empty when no CPU is
/// isolated): `""` and `"\n"` are no CPUs, `0-3,6` four and one.
pub fn parse_cpu_list_or_empty(text: &str) -> Result<Vec<u32>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    parse_cpu_list(text).map_err(|e| e.to_string())
}

/// The CPUs of this host and their roles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuRoles {
    pub online: Vec<u32>,
    /// `isolcpus=` (domain isolation): the scheduler does not balance onto them.
    pub isolated: Vec<u32>,
    /// `nohz_full=`: the tick stops when one task runs there.
    pub nohz_full: Vec<u32>,
}

impl CpuRoles {
    /// Reads `online`, `isolated` and `nohz_full` under `root` (normally [`SYS_CPU`]). A
    /// missing `isolated` or `nohz_full` (kernels without the option) is no CPUs; a missing
    /// or unreadable `online` is an error naming the file.
    pub fn read(root: &Path) -> Result<CpuRoles, String> {
        let file = |name: &str, required: bool| -> Result<Vec<u32>, String> {
            let path = root.join(name);
            match std::fs::read_to_string(&path) {
                Ok(t) => parse_cpu_list_or_empty(&t).map_err(|e| format!("{}: {e}", path.display())),
                Err(_) if !required => Ok(Vec::new()),
                Err(e) => Err(format!("cannot read {}: {e}", path.display())),
            }
        };
        Ok(CpuRoles { online: file("online", true)?, isolated: file("isolated", false)?, nohz_full: file("nohz_full", false)? })
    }

    /// "isolated, nohz_full", "isolated", "" for CPU `cpu`.
    pub fn role(&self, cpu: u32) -> String {
        let mut r = Vec::new();
        if self.isolated.contains(&cpu) {
            r.push("isolated");
        }
        if self.nohz_full.contains(&cpu) {
            r.push("nohz_full");
        }
        r.join(", ")
    }
}

/// The per-CPU columns of /proc/interrupts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterruptCounts {
    /// The CPU numbers of the columns, from the header (`CPU0 CPU2 ...`: offline CPUs have no
    /// column, so column k is not always CPU k).
    pub cpus: Vec<u32>,
    /// Per numbered interrupt, its count per column (rows with fewer columns are padded
    /// with 0).
    pub irqs: BTreeMap<u32, Vec<u64>>,
}

impl InterruptCounts {
    /// Parses the text of /proc/interrupts. Named rows (NMI, LOC, ERR…) are left out; a
    /// listing without a `CPUn` header is an error.
    pub fn parse(text: &str) -> Result<InterruptCounts, String> {
        let mut lines = text.lines();
        let header = lines.next().unwrap_or("");
        let cpus: Option<Vec<u32>> = header.split_whitespace().map(|t| t.strip_prefix("CPU").and_then(|n| n.parse().ok())).collect();
        let cpus = match cpus {
            Some(c) if !c.is_empty() => c,
            _ => return Err(format!("not a /proc/interrupts listing: its first line {header:?} does not name CPU columns")),
        };
        let mut irqs = BTreeMap::new();
        for line in lines {
            let Some((number, rest)) = line.trim_start().split_once(':') else { continue };
            let Ok(irq) = number.trim().parse::<u32>() else { continue };
            // The counts are the leading numbers, one per column; the chip name follows.
            let mut counts: Vec<u64> = rest.split_whitespace().take(cpus.len()).map_while(|t| t.parse().ok()).collect();
            counts.resize(cpus.len(), 0);
            irqs.insert(irq, counts);
        }
        Ok(InterruptCounts { cpus, irqs })
    }

    /// Reads and parses `<proc_root>/interrupts`.
    pub fn read(proc_root: &Path) -> Result<InterruptCounts, String> {
        let path = proc_root.join("interrupts");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The count of `irq` per CPU (CPU number → count); `None` when the irq is not listed.
    pub fn per_cpu(&self, irq: u32) -> Option<BTreeMap<u32, u64>> {
        self.irqs.get(&irq).map(|c| self.cpus.iter().copied().zip(c.iter().copied()).collect())
    }
}

/// Writes `cpu` to `<proc_root>/irq/<irq>/smp_affinity_list`: the kernel dispatches `irq` on
/// that CPU from its next interrupt (where the interrupt chip allows; the effective affinity
/// says what it did).
pub fn steer_irq(proc_root: &Path, irq: u32, cpu: u32) -> Result<(), String> {
    let path = irq_file(proc_root, irq, "smp_affinity_list");
    std::fs::write(&path, format!("{cpu}\n")).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied { " (writing an interrupt's affinity needs root)" } else { "" };
        format!("cannot steer irq {irq} to CPU {cpu}: writing {}: {e}{hint}", path.display())
    })
}

/// The CPUs the kernel really dispatches `irq` on (`effective_affinity_list`, Linux 4.15+);
/// `None` when the file is missing or unreadable.
pub fn effective_affinity(proc_root: &Path, irq: u32) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(irq_file(proc_root, irq, "effective_affinity_list")).ok()?;
    parse_cpu_list_or_empty(&text).ok()
}

fn irq_file(proc_root: &Path, irq: u32, name: &str) -> PathBuf {
    proc_root.join("irq").join(irq.to_string()).join(name)
}

/// Whether one steered interrupt was dispatched where it was sent over a run: its count per
/// CPU grew on `cpu` and nowhere else.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SteeringCheck {
    pub irq: u32,
    /// The CPU it was steered to.
    pub cpu: u32,
    /// Interrupts counted per CPU over the run (only the CPUs where it grew).
    pub grew: BTreeMap<u32, u64>,
    /// It grew on `cpu` and only there.
    pub ok: bool,
}

impl SteeringCheck {
    /// Compares the listings taken before and after the run; `None` when either lacks `irq`.
    pub fn of(irq: u32, cpu: u32, before: &InterruptCounts, after: &InterruptCounts) -> Option<SteeringCheck> {
        let (b, a) = (before.per_cpu(irq)?, after.per_cpu(irq)?);
        let grew: BTreeMap<u32, u64> =
            a.iter().map(|(c, n)| (*c, n.saturating_sub(b.get(c).copied().unwrap_or(0)))).filter(|&(_, d)| d > 0).collect();
        let ok = grew.keys().all(|&c| c == cpu) && grew.contains_key(&cpu);
        Some(SteeringCheck { irq, cpu, grew, ok })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EIGHT: &str = include_str!("../tests/fixtures/proc_interrupts_8cpu_offline.txt");
    const HERE: &str = include_str!("../tests/fixtures/proc_interrupts_2cpu_6.18.txt");

    #[test]
    fn cpu_lists_may_be_empty_and_bad_ones_are_named() {
        assert_eq!(parse_cpu_list_or_empty("").expect("ok"), Vec::<u32>::new());
        assert_eq!(parse_cpu_list_or_empty("\n").expect("ok"), Vec::<u32>::new());
        assert_eq!(parse_cpu_list_or_empty("2-3,6\n").expect("ok"), vec![2, 3, 6]);
        let e = parse_cpu_list_or_empty("1-x").expect_err("bad");
        assert!(e.contains("1-x"), "{e}");
    }

    #[test]
    fn roles_come_from_sysfs_and_missing_optional_files_are_no_cpus() {
        let dir = std::env::temp_dir().join(format!("tlpx-roles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("online"), "0-3,6\n").expect("w");
        std::fs::write(dir.join("isolated"), "2-3\n").expect("w");
        let r = CpuRoles::read(&dir).expect("roles");
        assert_eq!(r, CpuRoles { online: vec![0, 1, 2, 3, 6], isolated: vec![2, 3], nohz_full: vec![] });
        std::fs::write(dir.join("nohz_full"), "3,6").expect("w");
        let r = CpuRoles::read(&dir).expect("roles");
        assert_eq!(
            (r.role(0), r.role(2), r.role(3), r.role(6)),
            ("".into(), "isolated".into(), "isolated, nohz_full".into(), "nohz_full".into())
        );
        std::fs::remove_file(dir.join("online")).expect("rm");
        let e = CpuRoles::read(&dir).expect_err("no online");
        assert!(e.contains("online"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
        // This machine: every CPU it may run on is online.
        let here = CpuRoles::read(Path::new(SYS_CPU)).expect("this machine's CPUs");
        assert!(!here.online.is_empty());
    }

    #[test]
    fn proc_interrupts_columns_follow_the_header_with_offline_cpus() {
        let c = InterruptCounts::parse(EIGHT).expect("parses");
        assert_eq!(c.cpus, vec![0, 1, 2, 3, 5, 6, 7, 8], "CPU 4 is offline: no column");
        let v3 = c.per_cpu(124).expect("irq 124");
        assert_eq!((v3[&3], v3[&5], v3.get(&4)), (799, 3, None));
        // A count past 32 bits, in the last column.
        assert_eq!(c.per_cpu(125).expect("nvme")[&8], 4_294_967_296);
        assert!(c.per_cpu(999).is_none());
        assert!(!c.irqs.contains_key(&0) || c.irqs[&0][0] == 44);
        assert!(InterruptCounts::parse("garbage\n 1: 2 3").is_err());
        assert!(InterruptCounts::parse("").is_err());
    }

    #[test]
    fn this_machines_listing_parses() {
        let c = InterruptCounts::parse(HERE).expect("recorded listing");
        assert_eq!(c.cpus, vec![0, 1]);
        assert_eq!(c.per_cpu(26).expect("ttyS0"), BTreeMap::from([(0, 0), (1, 8)]));
        let live = InterruptCounts::read(Path::new(PROC)).expect("live /proc/interrupts");
        let online = CpuRoles::read(Path::new(SYS_CPU)).expect("cpus").online;
        assert_eq!(live.cpus, online, "one column per online CPU");
        assert!(live.irqs.values().all(|v| v.len() == live.cpus.len()));
    }

    #[test]
    fn steering_is_checked_against_the_counts() {
        let before = InterruptCounts::parse(EIGHT).expect("parses");
        let mut after = before.clone();
        after.irqs.get_mut(&122).expect("122")[1] += 50;
        let ok = SteeringCheck::of(122, 1, &before, &after).expect("listed");
        assert!(ok.ok && ok.grew == BTreeMap::from([(1, 50)]), "{ok:?}");
        // Grew on CPU 5 (column 4) too: not only where it was steered.
        after.irqs.get_mut(&122).expect("122")[4] += 2;
        let leaked = SteeringCheck::of(122, 1, &before, &after).expect("listed");
        assert!(!leaked.ok && leaked.grew[&5] == 2, "{leaked:?}");
        // Did not grow at all: not verified either.
        let none = SteeringCheck::of(121, 0, &before, &before).expect("listed");
        assert!(!none.ok && none.grew.is_empty());
        assert!(SteeringCheck::of(7, 0, &before, &after).is_none());
    }

    #[test]
    fn affinity_files_are_read_and_written_under_the_root() {
        let root = std::env::temp_dir().join(format!("tlpx-irqaff-{}", std::process::id()));
        std::fs::create_dir_all(root.join("irq/45")).expect("dir");
        std::fs::write(root.join("irq/45/effective_affinity_list"), "3\n").expect("w");
        steer_irq(&root, 45, 3).expect("written");
        assert_eq!(std::fs::read_to_string(root.join("irq/45/smp_affinity_list")).expect("r"), "3\n");
        assert_eq!(effective_affinity(&root, 45), Some(vec![3]));
        assert_eq!(effective_affinity(&root, 46), None);
        let e = steer_irq(&root, 46, 1).expect_err("no such irq");
        assert!(e.contains("irq 46") && e.contains("smp_affinity_list"), "{e}");
        std::fs::remove_dir_all(&root).ok();
    }
}
