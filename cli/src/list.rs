//! `shmenv list`: the built-in envs with their spaces, then the native envs of the plugin
//! packages installed for Python (entry-point group `shmenv.plugins`) with the package each
//! comes from, and the ids of shmenv's own plugin packages that are not installed; or, with
//! `--plugin LIB`, the envs of one library.
//!
//! The installed packages are those of a Python interpreter, asked with
//! `PYTHON -m shmenv.plugins --json`: `--python`, else `$SHMENV_PYTHON` (which the Python
//! package's `shmenv` launcher sets to the interpreter that runs it), else `python3` on
//! `PATH`. A Python that cannot be run, or has no shmenv package, lists no packages and
//! says so; the built-in envs are listed either way.

use crate::Error;
use serde_json::{json, Value};
use shmenv::worker::{Plugin, Registry};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prints a line to stdout; a closed stdout (`shmenv list | head`) ends the listing quietly
/// (exit status 0) instead of failing on the broken pipe.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(e.into());
        }
    }};
}

/// How long the Python that lists the installed packages may take.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(60);

/// `shmenv list` arguments.
#[derive(clap::Args)]
pub struct ListArgs {
    /// List the envs of this plugin library (a shared library implementing shmenv_env.h)
    /// instead of the built-in ones; the library is loaded into this process.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// The Python whose installed plugin packages are listed (default: $SHMENV_PYTHON, set
    /// by the Python package's `shmenv` command, else python3 on PATH).
    #[arg(long)]
    python: Option<PathBuf>,
}

/// Runs `shmenv list`.
pub fn run(registry: &Registry, args: ListArgs) -> Result<(), Error> {
    if let Some(path) = args.plugin {
        return list_plugin(&path);
    }
    list_builtins(registry)?;
    let python = args
        .python
        .or_else(|| std::env::var_os("SHMENV_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    list_packages(&python)
}

fn list_plugin(path: &Path) -> Result<(), Error> {
    let plugin = Plugin::load(path)?;
    out!("plugin {} (shmenv ABI version {})", path.display(), shmenv::worker::plugin::ABI_VERSION);
    // Every env is listed; one that cannot be created shows why, and the command fails.
    let mut failed = 0;
    for info in plugin.envs() {
        let (line, ok) = describe(&plugin, &info.id, &json!({}), info.max_episode_steps);
        failed += usize::from(!ok);
        out!("{:<14} {line}\n{:<14} {}", info.id, "", info.description);
    }
    match failed {
        0 => Ok(()),
        n => Err(format!(
            "{n} of the plugin's {} envs cannot be created with config {{}} (above)",
            plugin.envs().len()
        )
        .into()),
    }
}

/// One env's spec and time limit, or why it cannot be created (and `false`).
fn describe(plugin: &Arc<Plugin>, id: &str, config: &Value, limit: Option<u32>) -> (String, bool) {
    let limit = limit.map_or(String::new(), |k| format!(", limit {k} steps"));
    match plugin.make(id, config) {
        Ok(env) => (format!("{}{limit}", env.spec()), true),
        Err(e) => (format!("cannot be created with config {config}: {e}"), false),
    }
}

fn list_builtins(registry: &Registry) -> Result<(), Error> {
    out!("built-in envs (native, in Rust):");
    for id in registry.ids() {
        let entry = registry.get(&id).expect("listed id");
        let env = registry.make(&id, &json!({}))?;
        let limit = entry.max_episode_steps.map_or(String::new(), |k| format!(", limit {k} steps"));
        out!("{id:<14} {}{limit}\n{:<14} {}", env.spec(), "", entry.description);
    }
    Ok(())
}

/// The installed plugin packages of `python`: each id loaded here, created with the
/// package's default config, and shown with its spec, package and library.
fn list_packages(python: &Path) -> Result<(), Error> {
    let listing = match ask_python(python) {
        Ok(listing) => listing,
        Err(why) => {
            out!("\nplugin packages: none listed: {why}");
            return Ok(());
        }
    };
    let at = listing["python"].as_str().unwrap_or("?");
    let rows = listing["plugins"].as_array().cloned().unwrap_or_default();
    out!("\nplugin packages installed for {at} (entry-point group shmenv.plugins): {}", rows.len());
    let mut failed = 0;
    for row in &rows {
        let id = row["env_id"].as_str().unwrap_or("?");
        let from = format!(
            "{} {}",
            row["distribution"].as_str().unwrap_or("?"),
            row["version"].as_str().unwrap_or("?")
        );
        let (line, where_) = match (row["library"].as_str(), row["error"].as_str()) {
            (Some(lib), _) => match Plugin::load(Path::new(lib)) {
                Ok(plugin) => match plugin.envs().iter().find(|e| e.id == id) {
                    // Created with the package's default config; an env that needs more config
                    // (AtariC-v5's game) shows its message instead of its spaces.
                    Some(info) => {
                        let config =
                            if row["config"].is_object() { row["config"].clone() } else { json!({}) };
                        let (line, _) = describe(&plugin, id, &config, info.max_episode_steps);
                        (line, format!("native plugin from {from} ({lib}): {}", info.description))
                    }
                    None => {
                        failed += 1;
                        (format!("is not one of the ids of {lib}"), format!("from {from}"))
                    }
                },
                Err(e) => {
                    failed += 1;
                    (format!("cannot be loaded: {e}"), format!("from {from}"))
                }
            },
            (None, error) => {
                failed += 1;
                (format!("cannot be listed: {}", error.unwrap_or("no library given")), format!("from {from}"))
            }
        };
        out!("{id:<14} {line}\n{:<14} {where_}", "");
    }
    if let Some(missing) = listing["not_installed"].as_object() {
        for (package, ids) in missing {
            let ids: Vec<&str> = ids.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            out!("{}: not installed (pip install {package} for them)", ids.join(", "));
        }
        if missing.contains_key("shmenv-ale") {
            out!("  without shmenv-ale, shmenv.envpool's Atari tasks run through Gymnasium's ALE in Python workers");
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(format!(
            "{n} installed plugin env(s) cannot be loaded or created (above): reinstall their packages"
        )
        .into()),
    }
}

/// `python -m shmenv.plugins --json`, parsed; or why it could not be had.
fn ask_python(python: &Path) -> Result<Value, String> {
    let mut child = Command::new(python)
        .args(["-m", "shmenv.plugins", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {} ({e}); name a Python with --python", python.display()))?;
    // Read in threads, so that a long output cannot fill the pipe while this waits.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < PYTHON_TIMEOUT => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} -m shmenv.plugins did not finish within {} s",
                    python.display(),
                    PYTHON_TIMEOUT.as_secs()
                ));
            }
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        let last = err.lines().last().unwrap_or("").to_string();
        return Err(format!(
            "{} -m shmenv.plugins failed ({status}): {last}; name a Python that has shmenv with --python",
            python.display()
        ));
    }
    serde_json::from_str(out.trim())
        .map_err(|e| format!("{} -m shmenv.plugins printed no JSON ({e})", python.display()))
}
