//! Toolkit discovery. The first root that holds `include/cuda_runtime_api.h` wins, in this order:
//!
//! 1. `CUDA_PATH`, `CUDA_HOME`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`;
//! 2. the directory above the `bin/` that holds `nvcc` on `PATH` (that nvcc, not `PATH`, is
//!    tracked for rebuilds: see `env::path`);
//! 3. `/usr/local/cuda`, `/opt/cuda`;
//! 4. NVIDIA's PyPI wheels in the site-packages of the active Python (`PYTHON`, else `python3`):
//!    `nvidia/cu13` (one root for CUDA 13) and `nvidia/cuda_runtime` (the CUDA 12 runtime wheel).

use crate::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variables that name a toolkit root, in the order they are tried.
const ROOT_VARIABLES: [&str; 4] = ["CUDA_PATH", "CUDA_HOME", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR"];
/// Conventional install locations.
const FIXED_ROOTS: [&str; 2] = ["/usr/local/cuda", "/opt/cuda"];
/// Where NVIDIA's wheels put a toolkit root inside site-packages.
const WHEEL_ROOTS: [&str; 2] = ["nvidia/cu13", "nvidia/cuda_runtime"];
/// The install command printed when no toolkit is found.
const INSTALL_HINT: &str = "python3 -m pip install 'nvidia-cuda-nvcc==13.0.*' 'nvidia-cuda-runtime==13.0.*' \
'nvidia-cuda-crt==13.0.*' 'nvidia-nvvm==13.0.*'";

/// A CUDA toolkit root that holds the runtime headers.
pub struct Toolkit {
    /// The root: `include/`, `lib/` (or `lib64/`), maybe `bin/nvcc`.
    pub root: PathBuf,
    /// Which discovery step found it, for the build log.
    pub found_by: String,
    /// `CUDART_VERSION` from `cuda_runtime_api.h`, e.g. 13000.
    pub version: u32,
}

impl Toolkit {
    /// The header directory.
    pub fn include(&self) -> PathBuf {
        self.root.join("include")
    }

    /// Every header directory: the root's, and for NVIDIA's split CUDA 12 wheels the sibling
    /// wheels' (`nvidia/cuda_nvcc/include` holds the `crt/` headers the runtime's include).
    pub fn includes(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.include()];
        let parent = self.root.parent();
        if let Some(nvidia) = parent.filter(|dir| dir.file_name().is_some_and(|name| name == "nvidia")) {
            if let Ok(entries) = std::fs::read_dir(nvidia) {
                let mut siblings: Vec<PathBuf> = entries
                    .filter_map(|entry| entry.ok().map(|entry| entry.path().join("include")))
                    .filter(|dir| dir.is_dir() && *dir != self.include())
                    .collect();
                siblings.sort();
                dirs.extend(siblings);
            }
        }
        dirs
    }

    /// The directories that may hold cudart, existing ones only.
    pub fn lib_dirs(&self) -> Vec<PathBuf> {
        ["lib64", "lib", "lib/x64", "targets/x86_64-linux/lib"]
            .iter()
            .map(|dir| self.root.join(dir))
            .filter(|dir| dir.is_dir())
            .collect()
    }

    /// `13.0` for `CUDART_VERSION` 13000.
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version / 1000, (self.version % 1000) / 10)
    }
}

/// Finds the toolkit, or returns the message that says everywhere we looked and how to fix it.
pub fn find() -> Result<Toolkit, String> {
    let mut tried = Vec::new();
    for name in ROOT_VARIABLES {
        match env::var(name) {
            Some(value) => {
                let root = PathBuf::from(value);
                if let Some(toolkit) = accept(&root, format!("${name}"), &mut tried) {
                    return Ok(toolkit);
                }
            }
            None => tried.push(format!("${name}: not set")),
        }
    }
    match env::path().and_then(|path| find_nvcc(&path)) {
        Some(nvcc) => {
            let root = nvcc.parent().and_then(Path::parent).unwrap_or(Path::new("/"));
            if let Some(toolkit) = accept(root, format!("nvcc on PATH ({})", nvcc.display()), &mut tried) {
                // PATH is not tracked (see `env::path`): the nvcc it led to is.
                println!("cargo:rerun-if-changed={}", nvcc.display());
                return Ok(toolkit);
            }
        }
        None => tried.push("nvcc on $PATH: not found".to_string()),
    }
    for root in FIXED_ROOTS {
        if let Some(toolkit) = accept(Path::new(root), root.to_string(), &mut tried) {
            return Ok(toolkit);
        }
    }
    let python = env::var("PYTHON").unwrap_or_else(|| "python3".into());
    match site_packages(&python) {
        Ok(dirs) => {
            for dir in dirs {
                for wheel in WHEEL_ROOTS {
                    let root = dir.join(wheel);
                    let how = format!("NVIDIA's PyPI wheel in {}", dir.display());
                    if let Some(toolkit) = accept(&root, how, &mut tried) {
                        return Ok(toolkit);
                    }
                }
            }
        }
        Err(why) => tried.push(format!("site-packages of {}: {why}", python.to_string_lossy())),
    }
    Err(format!(
        "\nerror: cuda-stream-sys could not find a CUDA toolkit (a root holding include/cuda_runtime_api.h).\n\
         Places tried, in order:\n  - {}\n\
         Fix: set CUDA_PATH to the toolkit root (the directory holding include/ and lib/), or install one:\n  {INSTALL_HINT}\n\
         (For `cargo check` or `cargo doc` alone, the `prebuilt-bindings` feature needs no toolkit.)\n",
        tried.join("\n  - ")
    ))
}

/// Accepts `root` if it holds the runtime header, else notes why not in `tried`.
fn accept(root: &Path, found_by: String, tried: &mut Vec<String>) -> Option<Toolkit> {
    let header = root.join("include/cuda_runtime_api.h");
    if !header.is_file() {
        tried.push(format!("{found_by}: {} has no include/cuda_runtime_api.h", root.display()));
        return None;
    }
    let version = match read_cudart_version(&header) {
        Some(version) => version,
        None => {
            tried.push(format!("{found_by}: no CUDART_VERSION in {}", header.display()));
            return None;
        }
    };
    println!("cargo:rerun-if-changed={}", header.display());
    Some(Toolkit { root: root.to_path_buf(), found_by, version })
}

/// Parses `#define CUDART_VERSION 13000` from the header.
fn read_cudart_version(header: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(header).ok()?;
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define")?.trim_start();
        let value = rest.strip_prefix("CUDART_VERSION")?;
        value.trim().parse().ok()
    })
}

/// The first `nvcc` on `path`.
fn find_nvcc(path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join("nvcc")).find(|candidate| candidate.is_file())
}

/// The site-packages directories of `python`.
fn site_packages(python: &std::ffi::OsStr) -> Result<Vec<PathBuf>, String> {
    let script = "import site, sys\n\
                  dirs = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path\n\
                  print('\\n'.join(dirs))";
    let output =
        Command::new(python).args(["-c", script]).output().map_err(|error| format!("could not run it ({error})"))?;
    if !output.status.success() {
        return Err(format!("it failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let dir = PathBuf::from(line);
        if !line.is_empty() && dir.is_dir() && !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    Ok(dirs)
}
