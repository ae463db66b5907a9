//! Builds your own CUDA kernels from a build script, for a crate that uses `cuda-stream`:
//! compiled by nvcc from the toolkit `cuda-stream` was built with, in its default-stream mode,
//! for the [architectures](#architectures) of the GPUs they will run on, and linked against its
//! cudart. Linux only, as `cuda-stream` is.
//!
//! ```toml
//! [dependencies]
//! cuda-stream = "0.1"          # a normal dependency: its build metadata names the toolkit
//! [build-dependencies]
//! cuda-stream-build = "0.1"
//! ```
//!
//! ```no_run
//! // build.rs, the whole of `main`: every `kernels/*.cu` into `libmy_kernels.a`, linked.
//! cuda_stream_build::Kernels::from_dir("kernels").compile("my_kernels");
//! ```
//!
//! What it does, so that you need not know:
//!
//! * **Toolkit.** `cuda-stream` publishes the toolkit that `cuda-stream-sys` found to its
//!   dependents' build scripts (`DEP_CUDA_STREAM_*`; a crate that depends on `cuda-stream-sys`
//!   directly gets `DEP_CUDART_*`, read as well). Depend on `cuda-stream` as a normal
//!   dependency of the package whose build script this is.
//! * **Default stream.** With `cuda-stream`'s `per-thread-default-stream` feature the kernels
//!   are compiled with `--default-stream per-thread`, so handle 0 means the same stream in your
//!   C++ and in Rust.
//! * **Architectures**, below: the GPUs of the building machine, or what you name, or a broad
//!   default; what was built is `CUDA_STREAM_KERNEL_ARCHS` in your crate.
//! * **One runtime.** Nothing links a second cudart: `cuda-stream-sys` links it once (a second
//!   static cudart would have its own contexts and streams).
//! * **Eager loading in tests.** CUDA loads a module lazily, at its first launch, and that load
//!   can wait for a kernel already running on the device: a test that parks one stream on a
//!   flag and then launches a kernel for the first time deadlocks. The package's tests get a
//!   constructor that sets `CUDA_MODULE_LOADING=EAGER` before `main` (unless the environment
//!   sets it already); [`Kernels::lazy_loading`] opts out. Integration tests only (`tests/`, or
//!   `[[test]]` targets): the same build script works in a library, a binary, a library with
//!   binaries, a workspace member and a crate with only examples, which have none (Cargo
//!   refuses link arguments for tests there).
//! * **Shared cudart.** With `cuda-stream`'s `dynamic-linking` feature, the package's
//!   binaries, tests and examples get an rpath to the toolkit's `libcudart.so` (Cargo passes no
//!   link argument of `cuda-stream-sys` on to them), so they start without `LD_LIBRARY_PATH`.
//! * **No nvcc.** NVIDIA's CUDA 12 runtime wheel has none. [`Kernels::compile`] stops the
//!   build with one message saying so, unless `CUDA_STREAM_SKIP_KERNELS=1`: then nothing is
//!   compiled and the package gets the cfg `cuda_stream_kernels_missing`, for the code that
//!   declares and calls the kernels to leave itself out. docs.rs builds (`DOCS_RS`) are treated
//!   the same way, without a message: `cuda-stream` has no toolkit there, and rustdoc links
//!   nothing.
//! * **Errors that say what to do.** A failed nvcc shows its command line and its output; a
//!   target other than Linux, or a setting that names no architecture, is refused by name.
//!
//! # Architectures
//!
//! The first of these that names any wins:
//!
//! 1. [`Kernels::archs`] in the build script;
//! 2. `CUDA_STREAM_ARCHS`, then `CUDA_COMPUTE_CAP` (the variable candle, mistral.rs and
//!    `bindgen_cuda` read), in the environment of the build;
//! 3. the GPUs of the building machine, as `nvidia-smi --query-gpu=compute_cap` lists them
//!    (every distinct model);
//! 4. [`Kernels::fallback_archs`] in the build script;
//! 5. the broad default: for every architecture family (major version) that the toolkit's nvcc
//!    supports, SASS for its lowest member, which runs on every GPU of the family, and the PTX
//!    of the newest, which the driver compiles (JIT) for GPUs newer than the toolkit: what
//!    `nvcc -arch=all-major` builds. With CUDA 13.0: `sm_75` (Turing), `sm_80` (Ampere and Ada),
//!    `sm_90` (Hopper), `sm_100` and `sm_110` (Blackwell), `sm_120` (Blackwell GeForce and
//!    workstation), `compute_120`.
//!
//! A list is written as nvcc and the ecosystem write compute capabilities, separated by commas
//! (or spaces or semicolons): `90`, `9.0` and `sm_90` mean SASS for compute capability 9.0;
//! `90a` (or `sm_90a`) SASS with that architecture's specific features, which runs on it alone;
//! `compute_75` PTX only, for the driver to JIT. A list without any `compute_` entry also gets
//! the PTX of its newest plain architecture, so GPUs newer than all of it still run the kernels:
//! `80,90` builds `sm_80,sm_90,compute_90`. PTX alone (`CUDA_STREAM_ARCHS=compute_75`) builds no
//! SASS at all: every GPU from Turing on runs the kernels through the JIT (the first load is
//! slower; the driver caches the result). A word that is no architecture, or one the toolkit
//! cannot build (CUDA 13.0: compute capability 7.5 to 12.1), stops the build with the setting
//! that named it. A GPU found by `nvidia-smi` that the toolkit cannot build for gives a warning
//! and the next choice.
//!
//! The variables are tracked (`cargo:rerun-if-env-changed`): changing one rebuilds the kernels.
//! The GPUs are not: after moving a target directory to another machine, name the
//! architectures or `cargo clean`.
//!
//! What was built, e.g. `sm_80,sm_90,compute_90`, is [`Built::archs`], and the variable
//! `CUDA_STREAM_KERNEL_ARCHS` of the package (`env!("CUDA_STREAM_KERNEL_ARCHS")` in its code):
//! `cuda-stream`'s `kernel!` names it when a launch finds no image for the device
//! (`cudaErrorNoKernelImageForDevice`, 209).
//!
//! Cost: each SASS architecture is one more pass of nvcc's back end over every file. Measured on
//! a 2-core machine, nvcc's share of the build (the build script's run, files compiled in
//! parallel): the two small kernels of `templates/kernel-tests` take 1.0 s for one
//! architecture (`sm_90` and its PTX), 1.4 s for PTX only (`compute_75`), 2.4 s for the broad
//! default and 4.1 s for all twelve SASS architectures of CUDA 13.0; the workspace's five test
//! kernel files (about 700 lines) 2.9 s, 2.8 s, 7.8 s and 12.4 s. A build for the GPUs the
//! machine has costs what one architecture per GPU model costs.

mod archs;

pub use archs::{ARCHS_VAR, Arch, COMPUTE_CAP_VAR, KERNEL_ARCHS_ENV};

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that, set to `1`, skips the kernels when the toolkit has no nvcc.
pub const SKIP_VAR: &str = "CUDA_STREAM_SKIP_KERNELS";

/// The cfg set on the package when its kernels were skipped.
pub const MISSING_CFG: &str = "cuda_stream_kernels_missing";

/// Why the kernels could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No `DEP_CUDA_STREAM_*` or `DEP_CUDART_*` metadata: the package does not depend on
    /// `cuda-stream` (or `cuda-stream-sys`) as a normal dependency.
    NoToolkit,
    /// The toolkit has no nvcc.
    NoNvcc {
        /// The toolkit's root.
        root: String,
    },
    /// The build targets an operating system other than Linux.
    UnsupportedTarget {
        /// The target's `target_os`.
        os: String,
    },
    /// A setting names no architecture the toolkit can build.
    Archs {
        /// The setting as written: `CUDA_STREAM_ARCHS="9x"`, `Kernels::archs("9x")`.
        setting: String,
        /// What is wrong with it.
        why: String,
    },
    /// nvcc failed.
    Nvcc {
        /// The file it was compiling, if any.
        file: Option<PathBuf>,
        /// Its command line.
        command: String,
        /// Its exit status, or why it did not start.
        status: String,
        /// What it printed.
        output: String,
    },
    /// A file or directory could not be read or written.
    Io {
        /// What was being done.
        what: String,
        /// The error.
        error: std::io::Error,
    },
    /// Archiving the objects failed.
    Archive(cc::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoToolkit => write!(
                f,
                "no CUDA toolkit metadata (DEP_CUDA_STREAM_* or DEP_CUDART_*): add `cuda-stream` to this \
                 package's [dependencies]; its build metadata names the toolkit"
            ),
            Error::NoNvcc { root } => write!(
                f,
                "the CUDA toolkit at {root} has no nvcc (NVIDIA's CUDA 12 runtime wheel ships none): install \
                 nvcc (`pip install nvidia-cuda-nvcc`), or set {SKIP_VAR}=1 to build without the kernels \
                 (the package then gets the cfg `{MISSING_CFG}`)"
            ),
            Error::UnsupportedTarget { os } => write!(
                f,
                "this build targets `{os}`; cuda-stream and its kernels build for Linux only (nvcc's \
                 -fPIC objects, cudart with librt, libdl and libpthread)"
            ),
            Error::Archs { setting, why } => write!(f, "{setting}: {why}"),
            Error::Nvcc { file, command, status, output } => {
                match file {
                    Some(file) => write!(f, "nvcc failed on {} ({status})", file.display())?,
                    None => write!(f, "nvcc failed ({status})")?,
                }
                write!(f, "\ncommand: {command}")?;
                if !output.trim().is_empty() {
                    write!(f, "\noutput:\n{}", output.trim_end())?;
                }
                Ok(())
            }
            Error::Io { what, error } => write!(f, "{what}: {error}"),
            Error::Archive(error) => write!(f, "archiving the kernels failed: {error}"),
        }
    }
}

impl std::error::Error for Error {}

/// What [`Kernels::try_compile`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Built {
    /// The kernels are compiled and linked into the package.
    Linked {
        /// What they were built for: SASS first, then PTX, each in ascending order. The same
        /// list, comma-separated, is the package's `CUDA_STREAM_KERNEL_ARCHS`.
        archs: Vec<Arch>,
    },
    /// Nothing was compiled, and the package has the cfg `cuda_stream_kernels_missing`: the
    /// toolkit has no nvcc and `CUDA_STREAM_SKIP_KERNELS=1`, or this is a docs.rs build
    /// (`DOCS_RS`), where `cuda-stream` is built without a toolkit.
    Skipped,
}

impl Built {
    /// The architectures the kernels were built for (none when they were skipped).
    pub fn archs(&self) -> &[Arch] {
        match self {
            Built::Linked { archs } => archs,
            Built::Skipped => &[],
        }
    }
}

/// The toolkit `cuda-stream` was built with, as its build metadata describes it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Toolkit {
    /// The toolkit's root directory (none when `cuda-stream-sys` used its committed bindings
    /// without a toolkit: docs.rs, or its `prebuilt-bindings` feature).
    pub root: Option<PathBuf>,
    /// Its include directories.
    pub includes: Vec<PathBuf>,
    /// `CUDART_VERSION`, e.g. 13000.
    pub version: Option<u32>,
    /// Its nvcc, if it has one.
    pub nvcc: Option<PathBuf>,
    /// Whether handle 0 means the per-thread default stream.
    pub per_thread: bool,
    /// With `dynamic-linking`: the directory of the shared `libcudart`, which binaries need at
    /// run time (an rpath to it lets them find it).
    pub rpath: Option<PathBuf>,
}

fn var(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

impl Toolkit {
    /// Reads the metadata of `cuda-stream` (`DEP_CUDA_STREAM_*`), or else of `cuda-stream-sys`
    /// (`DEP_CUDART_*`).
    ///
    /// # Errors
    /// [`Error::NoToolkit`] when neither is there.
    pub fn from_dependencies() -> Result<Toolkit, Error> {
        let prefix = ["DEP_CUDA_STREAM_", "DEP_CUDART_"]
            .into_iter()
            .find(|prefix| var(&format!("{prefix}VERSION")).is_some())
            .ok_or(Error::NoToolkit)?;
        let get = |key: &str| var(&format!("{prefix}{key}"));
        Ok(Toolkit {
            root: get("ROOT").map(PathBuf::from),
            includes: get("INCLUDE").map(|paths| std::env::split_paths(&paths).collect()).unwrap_or_default(),
            version: get("VERSION").and_then(|version| version.parse().ok()),
            nvcc: get("NVCC").map(PathBuf::from),
            per_thread: get("PER_THREAD").as_deref() == Some("1"),
            rpath: get("RPATH").map(PathBuf::from),
        })
    }

    /// `13.0` for version 13000.
    fn version_string(&self) -> String {
        self.version.map_or("(unknown version)".to_string(), |v| format!("{}.{}", v / 1000, v % 1000 / 10))
    }
}

/// A command line as a shell would take it back: each word quoted when it needs to be.
fn command_line(command: &Command) -> String {
    let words = std::iter::once(command.get_program()).chain(command.get_args());
    let quoted: Vec<String> = words
        .map(|word| {
            let word = word.to_string_lossy();
            let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
            if plain { word.into_owned() } else { format!("'{}'", word.replace('\'', "'\\''")) }
        })
        .collect();
    quoted.join(" ")
}

/// A set of `.cu` files to compile into one static library.
#[derive(Clone, Debug)]
pub struct Kernels {
    sources: Vec<PathBuf>,
    includes: Vec<PathBuf>,
    flags: Vec<OsString>,
    eager: bool,
    /// Directories whose `*.cu` files are listed when compiling.
    dirs: Vec<PathBuf>,
    /// [`Kernels::archs`].
    archs: Option<String>,
    /// [`Kernels::fallback_archs`].
    fallback_archs: Option<String>,
}

impl Default for Kernels {
    fn default() -> Self {
        Kernels::new()
    }
}

impl Kernels {
    /// No files yet; eager loading in tests on.
    pub fn new() -> Kernels {
        Kernels {
            sources: Vec::new(),
            dirs: Vec::new(),
            includes: Vec::new(),
            flags: Vec::new(),
            eager: true,
            archs: None,
            fallback_archs: None,
        }
    }

    /// Every `*.cu` file directly in `dir`, with `dir` as an include directory (for its
    /// headers).
    pub fn from_dir(dir: impl AsRef<Path>) -> Kernels {
        let dir = dir.as_ref();
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut kernels = Kernels::new();
        kernels.include(dir);
        kernels.dirs.push(dir.to_path_buf());
        kernels
    }

    /// The files added one by one, then each directory's `*.cu` files in name order.
    fn all_sources(&self) -> Result<Vec<PathBuf>, Error> {
        let mut all = self.sources.clone();
        for dir in &self.dirs {
            let listing = |error| Error::Io { what: format!("listing {}", dir.display()), error };
            let mut files = Vec::new();
            for entry in std::fs::read_dir(dir).map_err(listing)? {
                let path = entry.map_err(listing)?.path();
                if path.extension().is_some_and(|ext| ext == "cu") {
                    println!("cargo:rerun-if-changed={}", path.display());
                    files.push(path);
                }
            }
            files.sort();
            all.extend(files);
        }
        Ok(all)
    }

    /// Adds a `.cu` file.
    pub fn file(&mut self, path: impl AsRef<Path>) -> &mut Kernels {
        println!("cargo:rerun-if-changed={}", path.as_ref().display());
        self.sources.push(path.as_ref().to_path_buf());
        self
    }

    /// Adds an include directory.
    pub fn include(&mut self, dir: impl AsRef<Path>) -> &mut Kernels {
        self.includes.push(dir.as_ref().to_path_buf());
        self
    }

    /// Passes a flag to nvcc (e.g. `-lineinfo`, `--use_fast_math`).
    pub fn flag(&mut self, flag: impl Into<OsString>) -> &mut Kernels {
        self.flags.push(flag.into());
        self
    }

    /// Builds for `archs` whatever the environment says: a list in the spelling of
    /// `CUDA_STREAM_ARCHS` (see [the crate docs](crate#architectures)), e.g. `"80,90"` or
    /// `"compute_75"`. Checked when compiling.
    pub fn archs(&mut self, archs: &str) -> &mut Kernels {
        self.archs = Some(archs.to_string());
        self
    }

    /// Builds for `archs` when neither [`Kernels::archs`], `CUDA_STREAM_ARCHS`,
    /// `CUDA_COMPUTE_CAP` nor a GPU of the building machine names any, instead of the broad
    /// default: for a crate whose GPUs are known, built on machines without one (CI).
    pub fn fallback_archs(&mut self, archs: &str) -> &mut Kernels {
        self.fallback_archs = Some(archs.to_string());
        self
    }

    /// Leaves CUDA's module loading as the environment says (lazy by default) in the package's
    /// tests.
    pub fn lazy_loading(&mut self) -> &mut Kernels {
        self.eager = false;
        self
    }

    /// Compiles and links the kernels as the static library `name`; stops the build with a
    /// clear message on any failure (see [`Kernels::try_compile`]).
    ///
    /// # Panics
    /// On every [`Error`]: a build script reports failure by panicking.
    pub fn compile(&self, name: &str) -> Built {
        match self.try_compile(name) {
            Ok(built) => built,
            Err(error) => panic!("cuda-stream-build: {error}"),
        }
    }

    /// Compiles every file with nvcc (in parallel) for the [architectures](crate#architectures),
    /// archives them as `lib<name>.a` in `OUT_DIR`, tells Cargo to link it, and sets
    /// `CUDA_STREAM_KERNEL_ARCHS` on the package to what was built. Without nvcc:
    /// [`Error::NoNvcc`], or with `CUDA_STREAM_SKIP_KERNELS=1` [`Built::Skipped`] and the cfg
    /// `cuda_stream_kernels_missing` (as on docs.rs).
    ///
    /// # Errors
    /// See [`Error`].
    pub fn try_compile(&self, name: &str) -> Result<Built, Error> {
        println!("cargo::rustc-check-cfg=cfg({MISSING_CFG})");
        let sources = self.all_sources()?;
        let toolkit = Toolkit::from_dependencies()?;
        if var("DOCS_RS").is_some() {
            // cuda-stream is built from its committed bindings there, with no toolkit; rustdoc
            // links nothing.
            println!("cargo:rustc-cfg={MISSING_CFG}");
            return Ok(Built::Skipped);
        }
        let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
        if os != "linux" {
            return Err(Error::UnsupportedTarget { os });
        }
        let Some(nvcc) = toolkit.nvcc.clone() else {
            let root = match &toolkit.root {
                Some(root) => root.display().to_string(),
                None => "(none: cuda-stream-sys uses its committed bindings, feature `prebuilt-bindings`)".to_string(),
            };
            if var(SKIP_VAR).as_deref() == Some("1") {
                println!("cargo:warning=the CUDA toolkit at {root} has no nvcc: kernels skipped ({SKIP_VAR}=1)");
                println!("cargo:rustc-cfg={MISSING_CFG}");
                return Ok(Built::Skipped);
            }
            return Err(Error::NoNvcc { root });
        };
        let supported = archs::supported_by(&nvcc)?;
        let choice = archs::choose(
            self.archs.as_deref(),
            var,
            archs::detect_gpus,
            self.fallback_archs.as_deref(),
            &supported,
            &toolkit.version_string(),
        )?;
        if let Some(why) = &choice.detected_unsupported {
            println!("cargo:warning=cuda-stream-build: {why}; building for {} instead", choice.source);
        }
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("Cargo sets OUT_DIR for build scripts"));
        let objects_dir = out_dir.join(format!("{name}-objects"));
        std::fs::create_dir_all(&objects_dir)
            .map_err(|error| Error::Io { what: format!("creating {}", objects_dir.display()), error })?;

        let args = self.nvcc_args(&toolkit, &choice.archs);
        let mut running = Vec::new();
        for (index, source) in sources.iter().enumerate() {
            let stem = source.file_stem().map_or("kernel".into(), |stem| stem.to_string_lossy());
            let object = objects_dir.join(format!("{index}-{stem}.o"));
            let mut command = Command::new(&nvcc);
            command.args(&args).arg("-c").arg(source).arg("-o").arg(&object);
            let line = command_line(&command);
            running.push((source, object, line, std::thread::spawn(move || command.output())));
        }
        let mut objects = Vec::new();
        let mut failure = None;
        for (source, object, command, thread) in running {
            let result = thread.join().expect("a thread that runs nvcc does not panic");
            let failed =
                |status: String, output: String| Error::Nvcc { file: Some(source.clone()), command, status, output };
            match result {
                Ok(output) => {
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&output.stdout),
                        String::from_utf8_lossy(&output.stderr)
                    );
                    if output.status.success() {
                        // nvcc's warnings go to the build script's log (`cargo build -vv`).
                        eprint!("{text}");
                        objects.push(object);
                    } else {
                        failure = failure.or(Some(failed(output.status.to_string(), text)));
                    }
                }
                Err(error) => failure = failure.or(Some(failed(format!("could not run it: {error}"), String::new()))),
            }
        }
        if let Some(error) = failure {
            return Err(error);
        }
        cc::Build::new().cpp(true).objects(&objects).try_compile(name).map_err(Error::Archive)?;
        if self.eager {
            let manifest_dir =
                PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("Cargo sets CARGO_MANIFEST_DIR"));
            // A test target added or removed reruns this script (Cargo refuses the tests' link
            // argument for a package that has none, and caches what this script printed).
            println!("cargo:rerun-if-changed={}", manifest_dir.join("Cargo.toml").display());
            println!("cargo:rerun-if-changed={}", manifest_dir.join("tests").display());
            if has_test_targets(&manifest_dir) {
                link_eager_loading(&out_dir)?;
            }
        }
        if let Some(dir) = &toolkit.rpath {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        }
        let list: Vec<String> = choice.archs.iter().map(Arch::to_string).collect();
        println!("cargo:rustc-env={KERNEL_ARCHS_ENV}={}", list.join(","));
        Ok(Built::Linked { archs: choice.archs })
    }

    /// nvcc's arguments but the file names.
    fn nvcc_args(&self, toolkit: &Toolkit, archs: &[Arch]) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["-Xcompiler".into(), "-fPIC".into()];
        let optimized = std::env::var("OPT_LEVEL").is_ok_and(|level| level != "0");
        args.push(if optimized { "-O3" } else { "-O0" }.into());
        if std::env::var_os("NVCC_CCBIN").is_none() {
            // The host compiler Cargo's C++ builds use, as cc would pass it.
            if let Ok(host) = cc::Build::new().cpp(true).cargo_metadata(false).try_get_compiler() {
                args.push("-ccbin".into());
                args.push(host.path().into());
            }
        }
        args.extend(archs.iter().map(|arch| arch.gencode().into()));
        if toolkit.per_thread {
            args.push("--default-stream".into());
            args.push("per-thread".into());
        }
        for dir in self.includes.iter().chain(&toolkit.includes) {
            let mut include = OsString::from("-I");
            include.push(dir);
            args.push(include);
        }
        args.extend(self.flags.iter().cloned());
        args
    }
}

/// Whether the package in `manifest_dir` has an integration-test target, by Cargo's rules: a
/// `[[test]]` table in its manifest, or, unless the manifest says `autotests = false`, a
/// `tests/*.rs` file or a `tests/*/main.rs`. Cargo refuses `cargo:rustc-link-arg-tests` for a
/// package without one ("does not have a test target"): a library, a binary, a library with
/// binaries or examples only.
fn has_test_targets(manifest_dir: &Path) -> bool {
    let manifest = std::fs::read_to_string(manifest_dir.join("Cargo.toml")).unwrap_or_default();
    let lines: Vec<String> =
        manifest.lines().map(|line| line.split('#').next().unwrap_or("").split_whitespace().collect()).collect();
    if lines.iter().any(|line| line == "[[test]]") {
        return true;
    }
    if lines.iter().any(|line| line == "autotests=false") {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(manifest_dir.join("tests")) else { return false };
    entries.flatten().any(|entry| {
        let path = entry.path();
        if path.is_dir() { path.join("main.rs").is_file() } else { path.extension().is_some_and(|ext| ext == "rs") }
    })
}

/// Links a constructor that sets `CUDA_MODULE_LOADING=EAGER` (unless set) before `main` into
/// the package's integration tests (see [`has_test_targets`]).
fn link_eager_loading(out_dir: &Path) -> Result<(), Error> {
    let source = out_dir.join("cuda_stream_eager_loading.c");
    let code = "/* Generated by cuda-stream-build: CUDA loads every module when it initializes, so a\n\
                 * first launch never waits for a kernel already running. */\n\
                #include <stdlib.h>\n\
                __attribute__((constructor)) static void cuda_stream_eager_loading(void) {\n\
                \x20 setenv(\"CUDA_MODULE_LOADING\", \"EAGER\", 0);\n\
                }\n";
    std::fs::write(&source, code)
        .map_err(|error| Error::Io { what: format!("writing {}", source.display()), error })?;
    let objects =
        cc::Build::new().file(&source).cargo_metadata(false).try_compile_intermediates().map_err(Error::Archive)?;
    for object in objects {
        println!("cargo:rustc-link-arg-tests={}", object.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of a package: its path and its text.
    type File = (&'static str, &'static str);

    /// A package directory under the system's temporary directory with `files`.
    fn package(name: &str, files: &[File]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cuda-stream-build-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn test_targets_are_found_by_cargos_rules() {
        let manifest = "[package]\nname = \"p\"\n";
        let shapes: [(&str, Vec<File>, bool); 8] = [
            ("library", vec![("Cargo.toml", manifest), ("src/lib.rs", "")], false),
            ("binary", vec![("Cargo.toml", manifest), ("src/main.rs", "fn main() {}")], false),
            (
                "examples only",
                vec![("Cargo.toml", manifest), ("src/lib.rs", ""), ("examples/e.rs", "fn main() {}")],
                false,
            ),
            ("a tests folder without tests", vec![("Cargo.toml", manifest), ("tests/data/input.txt", "")], false),
            ("tests/*.rs", vec![("Cargo.toml", manifest), ("tests/t.rs", "")], true),
            ("tests/*/main.rs", vec![("Cargo.toml", manifest), ("tests/whole/main.rs", "")], true),
            (
                "autotests = false",
                vec![("Cargo.toml", "[package]\nname = \"p\"\nautotests = false # none\n"), ("tests/t.rs", "")],
                false,
            ),
            (
                "a [[test]] table",
                vec![(
                    "Cargo.toml",
                    "[package]\nname = \"p\"\nautotests = false\n\n[[ test ]]\nname = \"t\"\npath = \"checks/t.rs\"\n",
                )],
                true,
            ),
        ];
        for (name, files, expected) in shapes {
            let dir = package(&name.replace(|c: char| !c.is_ascii_alphanumeric(), "-"), &files);
            assert_eq!(has_test_targets(&dir), expected, "{name}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_failed_nvcc_shows_its_command_line_and_its_output() {
        let mut command = Command::new("/opt/cuda 13/bin/nvcc");
        command.args(["-gencode=arch=compute_90,code=sm_90", "-DNAME=it's", "-c", "k.cu"]);
        let line = command_line(&command);
        assert_eq!(line, r"'/opt/cuda 13/bin/nvcc' -gencode=arch=compute_90,code=sm_90 '-DNAME=it'\''s' -c k.cu");
        let error = Error::Nvcc {
            file: Some("kernels/k.cu".into()),
            command: line.clone(),
            status: "exit status: 2".into(),
            output: "k.cu(3): error: expected a \";\"\n".into(),
        };
        assert_eq!(
            error.to_string(),
            format!(
                "nvcc failed on kernels/k.cu (exit status: 2)\ncommand: {line}\noutput:\nk.cu(3): error: expected a \";\""
            )
        );
    }
}
