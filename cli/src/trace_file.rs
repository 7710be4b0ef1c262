//! `bench --trace FILE` and `bench --sweep ... --plot FILE`: the file is opened for writing
//! before the run, so that a path that cannot be written is refused at once, not after the
//! whole run (with its results lost).

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};

/// The trace (or plot) file cannot be opened for writing.
#[derive(Debug)]
pub struct TraceFileError {
    /// The option that named it (`--trace`, `--plot`).
    flag: &'static str,
    /// The path given with `--trace`.
    path: PathBuf,
    /// The OS error.
    source: io::Error,
}

impl fmt::Display for TraceFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: cannot open it for writing: {} (checked before the run; nothing was run): give a path \
             in an existing directory that this user may write",
            self.flag,
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for TraceFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A trace file checked writable. A file created by the check is removed again unless
/// [`TraceFile::written`] was called (a run that fails leaves no empty file behind); an
/// existing one is opened without truncating it (the trace replaces it once written).
pub struct TraceFile {
    path: PathBuf,
    created: bool,
    written: bool,
}

impl TraceFile {
    /// Opens `path` (the `--trace` file) for writing (creating it if it does not exist) and
    /// closes it again.
    pub fn check(path: &Path) -> Result<TraceFile, TraceFileError> {
        Self::check_for("--trace", path)
    }

    /// [`TraceFile::check`] for the file of the option `flag` (named in the error).
    pub fn check_for(flag: &'static str, path: &Path) -> Result<TraceFile, TraceFileError> {
        let error = |source| TraceFileError { flag, path: path.to_path_buf(), source };
        let created = match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                OpenOptions::new().write(true).open(path).map_err(error)?;
                false
            }
            Err(e) => return Err(error(e)),
        };
        Ok(TraceFile { path: path.to_path_buf(), created, written: false })
    }

    /// The trace (or plot) is in the file: keep it.
    pub fn written(&mut self) {
        self.written = true;
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if self.created && !self.written {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
