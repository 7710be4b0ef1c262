//! Building the plugin libraries the tests load (shared with the CLI's tests).

/// Compiles a C or C++ source of this repository (`examples/c/cartpole.c`, `tests/plugins/x.c`)
/// into a shared library with the system compiler (`cc`/`c++`, or `$CC`/`$CXX`), once per
/// test process; returns its path. Written under a temporary name and renamed, so test
/// binaries running at once never load a half-written file.
pub fn plugin_library(source: &str) -> std::path::PathBuf {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.get(source) {
        return path.clone();
    }
    // The repository root: this package's directory or one above it (the CLI's tests).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|p| p.join("worker/include/shmenv_env.h").is_file())
        .expect("worker/include/shmenv_env.h above the package");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let stem = Path::new(source).file_stem().unwrap().to_str().unwrap();
    let out = dir.join(format!("lib{stem}.so"));
    let tmp = dir.join(format!("lib{stem}.{}.so.tmp", std::process::id()));
    let cpp = source.ends_with(".cpp");
    let (var, default, std) = if cpp { ("CXX", "c++", "-std=c++17") } else { ("CC", "cc", "-std=c99") };
    let compiler = std::env::var(var).unwrap_or_else(|_| default.into());
    let status = std::process::Command::new(&compiler)
        .args([std, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-I"])
        .arg(root.join("worker/include"))
        .arg("-o")
        .arg(&tmp)
        .arg(root.join(source))
        .arg("-lm")
        .status()
        .unwrap_or_else(|e| panic!("cannot run the compiler {compiler:?} ({var}): {e}"));
    assert!(status.success(), "{compiler} failed on {source}");
    std::fs::rename(&tmp, &out).unwrap();
    built.insert(source.into(), out.clone());
    out
}
