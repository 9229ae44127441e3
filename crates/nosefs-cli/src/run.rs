//! `nosefs run`: runs a program with the preload shim, so its calls on paths under `--at` are
//! served by noseFS: in its own process with `--image` (embedded mode), or by the `nosefs mount`
//! daemon of the mount point `--at` (daemon mode: every process shares the image).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The shim's file name, as cargo builds it.
const SHIM_FILE: &str = "libnosefs_preload.so";

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The image to serve in the program's own process (embedded mode). Without it, `--at`
    /// must be a `nosefs mount` mount point, whose daemon serves the program.
    #[arg(long)]
    image: Option<PathBuf>,
    /// The directory under which paths are noseFS's. With `--image`, created if missing; it
    /// stays empty: the kernel sees it as an empty directory, so a call the shim cannot serve
    /// fails there. Without, a noseFS mount point: calls the shim cannot serve reach the same
    /// files through the FUSE mount.
    #[arg(long)]
    at: PathBuf,
    /// Mount options: `sync` (every write durable on return), `populate` (fault the whole image
    /// in at mount).
    #[arg(short = 'o', value_delimiter = ',')]
    options: Vec<String>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    program: Vec<OsString>,
}

/// The shim library: `NOSEFS_PRELOAD_LIB`, else beside this executable, else `../lib/nosefs/`.
pub fn shim_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NOSEFS_PRELOAD_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(SHIM_FILE),
        dir.join("../lib/nosefs").join(SHIM_FILE),
    ];
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "cannot find {SHIM_FILE} beside {} (build it with `cargo build -p nosefs-preload`, or set NOSEFS_PRELOAD_LIB)",
            exe.display()
        )
    })
}

/// Execs the program; returns only on failure.
pub fn run(args: &RunArgs) -> Result<std::convert::Infallible, String> {
    for o in &args.options {
        if o != "sync" && o != "populate" {
            return Err(format!("unknown option {o:?} (known: sync, populate)"));
        }
    }
    let shim = shim_path()?
        .canonicalize()
        .map_err(|e| format!("shim library: {e}"))?;
    let Some(image) = &args.image else {
        return run_on_daemon(args, &shim);
    };
    let image = image
        .canonicalize()
        .map_err(|e| format!("image {}: {e}", image.display()))?;
    // Refuse what is not a noseFS image now, with the core's message, rather than in the program.
    // An image in use is not refused here: the program starts, and its noseFS calls get EBUSY
    // with a line naming the holder, as embedded mode promises.
    match nosefs_core::image::Image::open(&image, nosefs_core::pmem::Access::ReadOnly) {
        Ok(_) | Err(nosefs_core::Error::InUse(_)) => {}
        Err(e) => return Err(format!("{}: {e}", image.display())),
    }
    if !args.at.exists() {
        std::fs::create_dir_all(&args.at)
            .map_err(|e| format!("cannot create {}: {e}", args.at.display()))?;
    }
    let at = args
        .at
        .canonicalize()
        .map_err(|e| format!("{}: {e}", args.at.display()))?;
    if !at.is_dir() || at == Path::new("/") {
        return Err(format!("{} must be a directory other than /", at.display()));
    }
    exec_with_shim(args, &shim, Some(&image), &at)
}

/// Daemon mode: `--at` must be a noseFS mount point.
fn run_on_daemon(args: &RunArgs, shim: &Path) -> Result<std::convert::Infallible, String> {
    if !args.options.is_empty() {
        return Err("mount options belong to `nosefs mount` in daemon mode".into());
    }
    let at = args
        .at
        .canonicalize()
        .map_err(|e| format!("{}: {e}", args.at.display()))?;
    match nosefs_daemon::client::Remote::connect(at.as_os_str().as_bytes()) {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(format!(
                "{} is not a noseFS mount: start one with `nosefs mount IMAGE {}`, or give --image for embedded mode",
                at.display(),
                at.display()
            ))
        }
        Err(nosefs_core::Errno(libc::EIO)) => {
            return Err(format!(
                "the daemon of {} did not answer (is its `nosefs mount` still running?)",
                at.display()
            ))
        }
        Err(e) => {
            return Err(format!(
                "the daemon of {} refused this user: {}",
                at.display(),
                std::io::Error::from_raw_os_error(e.0)
            ))
        }
    }
    exec_with_shim(args, shim, None, &at)
}

fn exec_with_shim(
    args: &RunArgs,
    shim: &Path,
    image: Option<&Path>,
    at: &Path,
) -> Result<std::convert::Infallible, String> {
    let mut preload = shim.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.as_bytes().is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let (program, rest) = args.program.split_first().expect("clap requires a program");
    let mut command = std::process::Command::new(program);
    command
        .args(rest)
        .env("LD_PRELOAD", preload)
        .env("NOSEFS_AT", at)
        .env("NOSEFS_OPTIONS", args.options.join(","));
    match image {
        Some(image) => command.env("NOSEFS_IMAGE", image),
        None => command.env_remove("NOSEFS_IMAGE"),
    };
    let error = command.exec();
    Err(format!("cannot run {}: {error}", program.to_string_lossy()))
}
