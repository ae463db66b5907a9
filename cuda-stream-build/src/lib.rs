//! Builds your own CUDA kernels from a build script, for a crate that uses `cuda-stream`:
//! compiled by nvcc from the toolkit `cuda-stream` was built with, in its default-stream mode,
//! for the architectures in `CUDA_STREAM_ARCHS`, and linked against its cudart.
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
//! * **Architectures.** `CUDA_STREAM_ARCHS`, comma-separated compute capabilities (default
//!   `90`): SASS for each, and PTX for the highest so newer GPUs can JIT it.
//! * **One runtime.** Nothing links a second cudart: `cuda-stream-sys` links it once (a second
//!   static cudart would have its own contexts and streams).
//! * **Eager loading in tests.** CUDA loads a module lazily, at its first launch, and that load
//!   can wait for a kernel already running on the device: a test that parks one stream on a
//!   flag and then launches a kernel for the first time deadlocks. The package's tests get a
//!   constructor that sets `CUDA_MODULE_LOADING=EAGER` before `main` (unless the environment
//!   sets it already); [`Kernels::lazy_loading`] opts out.
//! * **No nvcc.** NVIDIA's CUDA 12 runtime wheel has none. [`Kernels::compile`] stops the
//!   build with one message saying so, unless `CUDA_STREAM_SKIP_KERNELS=1`: then nothing is
//!   compiled and the package gets the cfg `cuda_stream_kernels_missing`, for the code that
//!   declares and calls the kernels to leave itself out.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable with the architectures to build for (e.g. `80,90`).
pub const ARCHS_VAR: &str = "CUDA_STREAM_ARCHS";

/// The environment variable that, set to `1`, skips the kernels when the toolkit has no nvcc.
pub const SKIP_VAR: &str = "CUDA_STREAM_SKIP_KERNELS";

/// The cfg set on the package when its kernels were skipped.
pub const MISSING_CFG: &str = "cuda_stream_kernels_missing";

const DEFAULT_ARCHS: &str = "90";

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
    /// nvcc failed on a file (its diagnostics went to the build output).
    Nvcc {
        /// The file.
        file: PathBuf,
        /// nvcc's exit status, or why it did not start.
        status: String,
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
            Error::Nvcc { file, status } => write!(f, "nvcc failed on {} ({status})", file.display()),
            Error::Io { what, error } => write!(f, "{what}: {error}"),
            Error::Archive(error) => write!(f, "archiving the kernels failed: {error}"),
        }
    }
}

impl std::error::Error for Error {}

/// What [`Kernels::try_compile`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Built {
    /// The kernels are compiled and linked into the package.
    Linked,
    /// The toolkit has no nvcc and `CUDA_STREAM_SKIP_KERNELS=1`: nothing was compiled, and the
    /// package has the cfg `cuda_stream_kernels_missing`.
    Skipped,
}

/// The toolkit `cuda-stream` was built with, as its build metadata describes it.
#[derive(Clone, Debug)]
pub struct Toolkit {
    /// The toolkit's root directory.
    pub root: Option<PathBuf>,
    /// Its include directories.
    pub includes: Vec<PathBuf>,
    /// `CUDART_VERSION`, e.g. 13000.
    pub version: Option<u32>,
    /// Its nvcc, if it has one.
    pub nvcc: Option<PathBuf>,
    /// Whether handle 0 means the per-thread default stream.
    pub per_thread: bool,
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
            .find(|prefix| var(&format!("{prefix}INCLUDE")).is_some())
            .ok_or(Error::NoToolkit)?;
        let get = |key: &str| var(&format!("{prefix}{key}"));
        Ok(Toolkit {
            root: get("ROOT").map(PathBuf::from),
            includes: get("INCLUDE").map(|paths| std::env::split_paths(&paths).collect()).unwrap_or_default(),
            version: get("VERSION").and_then(|version| version.parse().ok()),
            nvcc: get("NVCC").map(PathBuf::from),
            per_thread: get("PER_THREAD").as_deref() == Some("1"),
        })
    }
}

/// The architectures to build for: `CUDA_STREAM_ARCHS` (comma-separated compute
/// capabilities), default `90`.
pub fn archs() -> Vec<String> {
    let archs = var(ARCHS_VAR).unwrap_or_else(|| DEFAULT_ARCHS.to_string());
    archs.split(',').map(str::trim).filter(|arch| !arch.is_empty()).map(str::to_string).collect()
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
}

impl Default for Kernels {
    fn default() -> Self {
        Kernels::new()
    }
}

impl Kernels {
    /// No files yet; eager loading in tests on.
    pub fn new() -> Kernels {
        Kernels { sources: Vec::new(), dirs: Vec::new(), includes: Vec::new(), flags: Vec::new(), eager: true }
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

    /// Compiles every file with nvcc (in parallel), archives them as `lib<name>.a` in
    /// `OUT_DIR` and tells Cargo to link it. Without nvcc: [`Error::NoNvcc`], or with
    /// `CUDA_STREAM_SKIP_KERNELS=1` [`Built::Skipped`] and the cfg `cuda_stream_kernels_missing`.
    ///
    /// # Errors
    /// See [`Error`].
    pub fn try_compile(&self, name: &str) -> Result<Built, Error> {
        println!("cargo::rustc-check-cfg=cfg({MISSING_CFG})");
        let sources = self.all_sources()?;
        let toolkit = Toolkit::from_dependencies()?;
        let Some(nvcc) = toolkit.nvcc.clone() else {
            let root = toolkit.root.as_ref().map_or("(unknown)".to_string(), |root| root.display().to_string());
            if var(SKIP_VAR).as_deref() == Some("1") {
                println!("cargo:warning=the CUDA toolkit at {root} has no nvcc: kernels skipped ({SKIP_VAR}=1)");
                println!("cargo:rustc-cfg={MISSING_CFG}");
                return Ok(Built::Skipped);
            }
            return Err(Error::NoNvcc { root });
        };
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("Cargo sets OUT_DIR for build scripts"));
        let objects_dir = out_dir.join(format!("{name}-objects"));
        std::fs::create_dir_all(&objects_dir)
            .map_err(|error| Error::Io { what: format!("creating {}", objects_dir.display()), error })?;

        let args = self.nvcc_args(&toolkit);
        let mut running = Vec::new();
        for (index, source) in sources.iter().enumerate() {
            let stem = source.file_stem().map_or("kernel".into(), |stem| stem.to_string_lossy());
            let object = objects_dir.join(format!("{index}-{stem}.o"));
            let child = Command::new(&nvcc).args(&args).arg("-c").arg(source).arg("-o").arg(&object).spawn();
            running.push((source, object, child));
        }
        let mut objects = Vec::new();
        for (source, object, child) in running {
            let status = child.and_then(|mut child| child.wait());
            match status {
                Ok(status) if status.success() => objects.push(object),
                Ok(status) => return Err(Error::Nvcc { file: source.clone(), status: status.to_string() }),
                Err(error) => {
                    return Err(Error::Nvcc { file: source.clone(), status: format!("{}: {error}", nvcc.display()) });
                }
            }
        }
        cc::Build::new().cpp(true).objects(&objects).try_compile(name).map_err(Error::Archive)?;
        if self.eager {
            link_eager_loading(&out_dir)?;
        }
        Ok(Built::Linked)
    }

    /// nvcc's arguments but the file names.
    fn nvcc_args(&self, toolkit: &Toolkit) -> Vec<OsString> {
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
        let archs = archs();
        for arch in &archs {
            args.push(format!("-gencode=arch=compute_{arch},code=sm_{arch}").into());
        }
        if let Some(newest) = archs.iter().max_by_key(|arch| arch.parse::<u32>().unwrap_or(0)) {
            args.push(format!("-gencode=arch=compute_{newest},code=compute_{newest}").into());
        }
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

/// Links a constructor that sets `CUDA_MODULE_LOADING=EAGER` (unless set) before `main` into
/// the package's tests (Cargo refuses link arguments for target kinds a package lacks, and
/// every package with a library has tests).
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
