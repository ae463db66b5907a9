//! Which GPU architectures the kernels are built for: the spellings accepted, where the choice
//! comes from (in order of precedence), and what each choice expands to.

use crate::Error;
use std::fmt;
use std::process::Command;
use std::str::FromStr;

/// The environment variable with the architectures to build for (e.g. `80,90`).
pub const ARCHS_VAR: &str = "CUDA_STREAM_ARCHS";

/// The Rust ecosystem's variable for one GPU's compute capability (candle, mistral.rs,
/// `bindgen_cuda`), read when [`ARCHS_VAR`] is not set.
pub const COMPUTE_CAP_VAR: &str = "CUDA_COMPUTE_CAP";

/// The variable, set on the package by [`Kernels::compile`](crate::Kernels::compile), that
/// lists the architectures its kernels were built for, e.g. `sm_80,sm_90,compute_90`.
pub const KERNEL_ARCHS_ENV: &str = "CUDA_STREAM_KERNEL_ARCHS";

/// One code target of a kernel build: machine code (SASS) for one architecture, or PTX that the
/// driver compiles (JIT) for the GPU it runs on, of that architecture or any newer one.
///
/// Written as nvcc names them: `sm_90` (SASS), `sm_90a` (SASS for that architecture only, with
/// its specific features), `compute_75` (PTX).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// Whether this is PTX rather than SASS (sorts SASS first).
    ptx: bool,
    /// The compute capability times ten: 75, 90, 120.
    capability: u32,
    /// `a` (architecture-specific) or `f` (family-specific) features, if any.
    suffix: Option<char>,
}

impl Arch {
    /// SASS for the compute capability `capability` (times ten: `90` for 9.0).
    pub fn sass(capability: u32) -> Arch {
        Arch { ptx: false, capability, suffix: None }
    }

    /// PTX for the compute capability `capability` (times ten), JIT-compiled by the driver.
    pub fn ptx(capability: u32) -> Arch {
        Arch { ptx: true, capability, suffix: None }
    }

    /// Whether this target is PTX (`compute_*`) rather than SASS (`sm_*`).
    pub fn is_ptx(&self) -> bool {
        self.ptx
    }

    /// The compute capability times ten: 90 for `sm_90` and `sm_90a`.
    pub fn capability(&self) -> u32 {
        self.capability
    }

    /// The `-gencode` argument of nvcc that builds this target.
    pub(crate) fn gencode(&self) -> String {
        let virtual_arch = format!("compute_{}{}", self.capability, self.suffix.map(String::from).unwrap_or_default());
        format!("-gencode=arch={virtual_arch},code={self}")
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.ptx { "compute" } else { "sm" };
        write!(f, "{kind}_{}", self.capability)?;
        if let Some(suffix) = self.suffix {
            write!(f, "{suffix}")?;
        }
        Ok(())
    }
}

/// Parses one architecture: `90`, `9.0`, `sm_90` (SASS), `90a`, `sm_90a`, `100f` (SASS with
/// architecture- or family-specific features), `compute_90` (PTX only).
impl FromStr for Arch {
    type Err = String;

    fn from_str(text: &str) -> Result<Arch, String> {
        let lower = text.trim().to_ascii_lowercase();
        let (ptx, rest) = match lower.strip_prefix("compute_") {
            Some(rest) => (true, rest),
            None => (false, lower.strip_prefix("sm_").unwrap_or(&lower)),
        };
        let (number, suffix) = match rest.strip_suffix(['a', 'f']) {
            Some(number) => (number, rest.chars().last()),
            None => (rest, None),
        };
        let capability = match number.split_once('.') {
            Some((major, minor)) if minor.len() == 1 => format!("{major}{minor}"),
            Some(_) => String::new(),
            None => number.to_string(),
        };
        let valid = (2..=3).contains(&capability.len()) && capability.chars().all(|c| c.is_ascii_digit());
        match capability.parse::<u32>() {
            Ok(capability) if valid && capability >= 10 => Ok(Arch { ptx, capability, suffix }),
            _ => Err(format!(
                "`{}` is not a GPU architecture (write 90, 9.0 or sm_90 for SASS, 90a for its \
                 architecture-specific features, compute_90 for PTX only)",
                text.trim()
            )),
        }
    }
}

/// Where the architectures of a build came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// [`Kernels::archs`](crate::Kernels::archs).
    Builder,
    /// An environment variable, by name.
    Var(&'static str),
    /// The GPUs `nvidia-smi` reports on the building machine.
    Detected,
    /// [`Kernels::fallback_archs`](crate::Kernels::fallback_archs).
    Fallback,
    /// The broad default: one SASS per architecture family the toolkit supports.
    Broad,
}

impl Source {
    /// The setting that named `list`, as written: `CUDA_STREAM_ARCHS="90"`, `Kernels::archs("90")`.
    fn setting(&self, list: &str) -> String {
        match self {
            Source::Var(name) => format!("{name}={list:?}"),
            other => format!("{other}({list:?})"),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builder => write!(f, "Kernels::archs"),
            Source::Var(name) => write!(f, "{name}"),
            Source::Detected => write!(f, "nvidia-smi"),
            Source::Fallback => write!(f, "Kernels::fallback_archs"),
            Source::Broad => write!(f, "the broad default"),
        }
    }
}

/// Parses a list of architectures (separated by commas, semicolons or spaces) into the targets
/// it builds: SASS for each `sm` entry and PTX for each `compute_` entry; a list without any
/// `compute_` entry also gets the PTX of its highest plain (unsuffixed) architecture, so that
/// GPUs newer than every SASS in it still run the kernels (through the driver's JIT).
pub(crate) fn expand(list: &str) -> Result<Vec<Arch>, String> {
    let mut archs = Vec::new();
    for word in list.split([',', ';', ' ', '\t', '\n']).filter(|word| !word.is_empty()) {
        let arch: Arch = word.parse()?;
        if !archs.contains(&arch) {
            archs.push(arch);
        }
    }
    if archs.is_empty() {
        return Err("no architecture named".to_string());
    }
    if !archs.iter().any(Arch::is_ptx) {
        let newest_plain = archs.iter().filter(|arch| arch.suffix.is_none()).map(Arch::capability).max();
        archs.extend(newest_plain.map(Arch::ptx));
    }
    archs.sort();
    Ok(archs)
}

/// The broad default for a toolkit whose nvcc builds SASS for `supported` (capabilities times
/// ten): for each architecture family (major version), SASS of its lowest supported member,
/// which runs on every GPU of the family (CUDA's binary compatibility within a major version),
/// and PTX of the highest of those: the set nvcc's `-arch=all-major` builds.
pub(crate) fn broad(supported: &[u32]) -> Vec<Arch> {
    let mut families: Vec<u32> = Vec::new();
    let mut sorted = supported.to_vec();
    sorted.sort_unstable();
    for capability in sorted {
        if families.last().is_none_or(|last| last / 10 != capability / 10) {
            families.push(capability);
        }
    }
    let mut archs: Vec<Arch> = families.iter().copied().map(Arch::sass).collect();
    archs.extend(families.last().copied().map(Arch::ptx));
    archs
}

/// The architectures of a build, where they came from, and why detected GPUs were passed over.
pub(crate) struct Choice {
    /// The targets, SASS first, each in ascending order.
    pub archs: Vec<Arch>,
    /// Where they came from.
    pub source: Source,
    /// Why detected GPUs were not used, when that was the case.
    pub detected_unsupported: Option<String>,
}

/// The architectures to build for, and where they came from, by precedence: `builder`
/// ([`Kernels::archs`](crate::Kernels::archs)), `CUDA_STREAM_ARCHS`, `CUDA_COMPUTE_CAP`, the
/// GPUs `detect` reports, `fallback` ([`Kernels::fallback_archs`](crate::Kernels::fallback_archs)),
/// the broad default for the toolkit's `supported` capabilities (CUDA version `cuda`).
///
/// Named architectures the toolkit cannot build are refused here, with the setting that named
/// them. Detected GPUs it cannot build for give the next choice instead, with the reason.
pub(crate) fn choose(
    builder: Option<&str>,
    var: impl Fn(&'static str) -> Option<String>,
    detect: impl FnOnce() -> Option<Vec<String>>,
    fallback: Option<&str>,
    supported: &[u32],
    cuda: &str,
) -> Result<Choice, Error> {
    let named = |source: Source, list: &str| -> Result<Choice, Error> {
        let refuse = |why: String| Error::Archs { setting: source.setting(list), why };
        let archs = expand(list).map_err(refuse)?;
        if let Some(arch) = archs.iter().find(|arch| !supported.contains(&arch.capability)) {
            return Err(refuse(unsupported(*arch, supported, cuda)));
        }
        Ok(Choice { archs, source, detected_unsupported: None })
    };
    if let Some(list) = builder {
        return named(Source::Builder, list);
    }
    for name in [ARCHS_VAR, COMPUTE_CAP_VAR] {
        if let Some(list) = var(name) {
            return named(Source::Var(name), &list);
        }
    }
    let mut detected_unsupported = None;
    if let Some(caps) = detect() {
        match expand(&caps.join(",")) {
            Ok(archs) => match archs.iter().find(|arch| !supported.contains(&arch.capability)) {
                None => return Ok(Choice { archs, source: Source::Detected, detected_unsupported: None }),
                Some(arch) => {
                    detected_unsupported = Some(format!(
                        "nvidia-smi reports a GPU of compute capability {}.{}: {}",
                        arch.capability / 10,
                        arch.capability % 10,
                        unsupported(*arch, supported, cuda)
                    ));
                }
            },
            Err(why) => detected_unsupported = Some(format!("nvidia-smi's compute capabilities: {why}")),
        }
    }
    if let Some(list) = fallback {
        let choice = named(Source::Fallback, list)?;
        return Ok(Choice { detected_unsupported, ..choice });
    }
    Ok(Choice { archs: broad(supported), source: Source::Broad, detected_unsupported })
}

/// Why `arch` cannot be built by a toolkit that supports `supported`.
fn unsupported(arch: Arch, supported: &[u32], cuda: &str) -> String {
    let list: Vec<String> = supported.iter().map(u32::to_string).collect();
    format!("{arch} is not an architecture the nvcc of CUDA {cuda} builds for (it builds {})", list.join(", "))
}

/// The compute capabilities of the GPUs on this machine, from `nvidia-smi` (one entry per
/// distinct GPU model), or `None` when it is missing, fails or reports none.
pub(crate) fn detect_gpus() -> Option<Vec<String>> {
    let output = Command::new("nvidia-smi").args(["--query-gpu=compute_cap", "--format=csv,noheader"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let mut caps: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines().map(str::trim).filter(|line| !line.is_empty()) {
        if !caps.iter().any(|cap| cap == line) {
            caps.push(line.to_string());
        }
    }
    (!caps.is_empty()).then_some(caps)
}

/// The capabilities (times ten) nvcc builds SASS for, from `nvcc --list-gpu-code`.
pub(crate) fn supported_by(nvcc: &std::path::Path) -> Result<Vec<u32>, Error> {
    let mut command = Command::new(nvcc);
    command.arg("--list-gpu-code");
    let line = crate::command_line(&command);
    let failed = |status: String, output: String| Error::Nvcc { file: None, command: line.clone(), status, output };
    let output = command.output().map_err(|error| failed(format!("could not run it: {error}"), String::new()))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let caps: Vec<u32> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("sm_"))
        .filter_map(|number| number.parse().ok())
        .collect();
    if !output.status.success() || caps.is_empty() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(failed(output.status.to_string(), format!("{text}{stderr}")));
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUDA_13_0: [u32; 12] = [75, 80, 86, 87, 88, 89, 90, 100, 110, 103, 120, 121];

    fn names(archs: &[Arch]) -> Vec<String> {
        archs.iter().map(Arch::to_string).collect()
    }

    #[test]
    fn every_spelling_of_one_architecture_means_the_same() {
        for spelling in ["90", "9.0", "sm_90", " SM_90 "] {
            assert_eq!(spelling.parse::<Arch>(), Ok(Arch::sass(90)), "{spelling}");
        }
        assert_eq!("12.0".parse::<Arch>(), Ok(Arch::sass(120)));
        assert_eq!("compute_75".parse::<Arch>(), Ok(Arch::ptx(75)));
        assert_eq!("90a".parse::<Arch>().map(|arch| arch.to_string()), Ok("sm_90a".to_string()));
        assert_eq!("sm_100f".parse::<Arch>().map(|arch| arch.to_string()), Ok("sm_100f".to_string()));
        assert_eq!(
            "compute_90a".parse::<Arch>().map(|arch| arch.gencode()),
            Ok("-gencode=arch=compute_90a,code=compute_90a".into())
        );
        assert_eq!(Arch::sass(86).gencode(), "-gencode=arch=compute_86,code=sm_86");
    }

    #[test]
    fn garbage_is_refused_with_the_spellings_that_work() {
        for garbage in ["9", "sm_9x", "ninety", "9.10", "1000", "compute_", "90b", "8.6.1", ""] {
            let error = garbage.parse::<Arch>().expect_err(garbage);
            assert!(error.contains("compute_90 for PTX only"), "{garbage}: {error}");
        }
    }

    #[test]
    fn a_list_gets_the_ptx_of_its_newest_plain_architecture_unless_it_names_ptx() {
        assert_eq!(names(&expand("90").unwrap()), ["sm_90", "compute_90"]);
        assert_eq!(names(&expand("9.0, 8.0;sm_90 86").unwrap()), ["sm_80", "sm_86", "sm_90", "compute_90"]);
        assert_eq!(names(&expand("compute_75").unwrap()), ["compute_75"]);
        assert_eq!(names(&expand("80,compute_80").unwrap()), ["sm_80", "compute_80"]);
        assert_eq!(names(&expand("80,90a").unwrap()), ["sm_80", "sm_90a", "compute_80"]);
        assert_eq!(names(&expand("90a").unwrap()), ["sm_90a"]);
        assert!(expand(" , ").is_err());
    }

    #[test]
    fn the_broad_default_is_one_sass_per_family_and_the_newest_ptx() {
        // What `nvcc -arch=all-major` of CUDA 13.0 builds.
        assert_eq!(names(&broad(&CUDA_13_0)), ["sm_75", "sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"]);
    }

    fn choose_with(
        builder: Option<&str>,
        vars: &[(&str, &str)],
        detected: Option<&[&str]>,
        fallback: Option<&str>,
    ) -> Result<(Vec<String>, Source), Error> {
        let var = |name: &str| vars.iter().find(|(var, _)| *var == name).map(|(_, value)| value.to_string());
        let detect = || detected.map(|caps| caps.iter().map(|cap| cap.to_string()).collect());
        choose(builder, var, detect, fallback, &CUDA_13_0, "13.0").map(|choice| (names(&choice.archs), choice.source))
    }

    #[test]
    fn the_builder_beats_the_variables_which_beat_the_gpus_which_beat_the_defaults() {
        let vars = [(ARCHS_VAR, "86"), (COMPUTE_CAP_VAR, "8.9")];
        let gpus: &[&str] = &["9.0", "8.0", "9.0"];
        let choice = |builder, vars, gpus, fallback| choose_with(builder, vars, gpus, fallback).unwrap();
        assert_eq!(
            choice(Some("75"), &vars, Some(gpus), Some("90")),
            (vec!["sm_75".into(), "compute_75".into()], Source::Builder)
        );
        assert_eq!(choice(None, &vars, Some(gpus), None).1, Source::Var(ARCHS_VAR));
        assert_eq!(
            choice(None, &vars[1..], Some(gpus), None),
            (vec!["sm_89".into(), "compute_89".into()], Source::Var(COMPUTE_CAP_VAR))
        );
        assert_eq!(
            choice(None, &[], Some(gpus), Some("75")),
            (vec!["sm_80".into(), "sm_90".into(), "compute_90".into()], Source::Detected)
        );
        assert_eq!(choice(None, &[], None, Some("90")).1, Source::Fallback);
        assert_eq!(choice(None, &[], None, None).1, Source::Broad);
    }

    #[test]
    fn a_bad_setting_names_itself_and_its_value() {
        let error = choose_with(None, &[(ARCHS_VAR, "90,sm_9x")], None, None).unwrap_err().to_string();
        assert!(error.starts_with("CUDA_STREAM_ARCHS=\"90,sm_9x\": `sm_9x` is not a GPU architecture"), "{error}");
        let error = choose_with(None, &[(COMPUTE_CAP_VAR, "70")], None, None).unwrap_err().to_string();
        assert!(
            error.contains("CUDA_COMPUTE_CAP=\"70\": sm_70 is not an architecture the nvcc of CUDA 13.0 builds"),
            "{error}"
        );
        let error = choose_with(Some("compute_50"), &[], None, None).unwrap_err().to_string();
        assert!(error.starts_with("Kernels::archs(\"compute_50\")"), "{error}");
    }

    #[test]
    fn gpus_the_toolkit_cannot_build_for_give_the_broad_default_and_say_why() {
        let var = |_: &str| None;
        let choice = choose(None, var, || Some(vec!["7.0".into()]), None, &CUDA_13_0, "13.0").unwrap();
        assert_eq!(choice.source, Source::Broad);
        let why = choice.detected_unsupported.unwrap();
        assert!(why.contains("compute capability 7.0: sm_70 is not an architecture"), "{why}");
        let choice = choose(None, var, || Some(vec!["[N/A]".into()]), Some("90"), &CUDA_13_0, "13.0").unwrap();
        assert_eq!(
            (choice.source, names(&choice.archs)),
            (Source::Fallback, vec!["sm_90".into(), "compute_90".into()])
        );
    }
}
