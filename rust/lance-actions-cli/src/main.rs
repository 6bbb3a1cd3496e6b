//! `lance-actions`: Lance transactions as actions, from the command line.

mod branch;
mod check;
mod demo;
mod explain;
mod graph;
mod keyed;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "lance-actions", version, about = "Lance transactions as actions: masks, rebase, three-way verdicts")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum MatrixFormat {
    Md,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Print the conflict matrix derived from the action masks and rebases.
    Matrix {
        #[arg(long, value_enum, default_value = "md")]
        format: MatrixFormat,
    },
    /// Show each version's operation, its actions and their read/write masks.
    Explain {
        uri: String,
        #[arg(long)]
        version: Option<u64>,
    },
    /// Each version with its actions, the verdict history recorded by our commits, and provenance.
    Log { uri: String },
    /// Judge an uncommitted Lance transaction (.txn) against the versions committed after its
    /// read version: our verdict and reason next to Lance's own.
    Check {
        uri: String,
        #[arg(long)]
        txn: std::path::PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Build a small dataset, stage conflicting and compatible transactions, print both verdicts.
    Demo {
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Keyed tables: create, strict insert, upsert, update, delete by key, and key migration.
    Keyed {
        #[command(subcommand)]
        command: keyed::KeyedCommand,
    },
    #[command(flatten)]
    Replay(branch::ReplayCommand),
    /// Logical branches: list (logical -> physical), create, delete.
    Branch {
        #[command(subcommand)]
        command: branch::BranchCommand,
    },
    /// Keyed graphs: init, branches, constraint-checked writes, three-way merge, export, log.
    Graph {
        #[command(subcommand)]
        command: graph::GraphCommand,
    },
}

/// A user-facing failure: one line, non-zero exit.
pub type CliResult = Result<(), String>;

/// Why a command failed: a one-line message for `main` to print (exit 1), or a report the command
/// already printed, with its exit code.
pub enum Failure {
    Message(String),
    Reported { code: u8 },
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Message(message)
    }
}

fn main() -> ExitCode {
    // A reader that stops early (`lance-actions log t | head`) closes the pipe: exit quietly as
    // other command-line tools do, instead of panicking on the next print. Rust ignores SIGPIPE by
    // default; restoring the default action is the whole fix, for every command at once.
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; only resets a signal disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), Failure> = runtime.block_on(async {
        match cli.command {
            Command::Matrix { format } => match format {
                MatrixFormat::Md => print!("{}", lance_actions::matrix::render_markdown()),
                MatrixFormat::Json => println!("{}", lance_actions::matrix::render_json()),
            },
            Command::Explain { uri, version } => explain::run(&uri, version).await?,
            Command::Log { uri } => explain::log(&uri).await?,
            Command::Check { uri, txn, json } => check::run(&uri, &txn, json).await?,
            Command::Demo { dir } => demo::run(dir).await?,
            Command::Keyed { command } => keyed::run(command).await?,
            Command::Replay(command) => branch::run(command).await?,
            Command::Branch { command } => branch::run_branch(command).await?,
            Command::Graph { command } => graph::run(command).await?,
        }
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Message(message)) => {
            eprintln!("error: {}", without_source_locations(&message));
            ExitCode::FAILURE
        }
        Err(Failure::Reported { code }) => ExitCode::from(code),
    }
}

/// A message for users: Lance's errors end with the source locations they were raised at
/// (`…, /root/.cargo/registry/…/object_reader.rs:335:56`), which say nothing to a user; they are
/// dropped, the rest of the message is kept as it is.
pub fn without_source_locations(message: &str) -> String {
    message.split(", ").filter(|part| !is_source_location(part)).collect::<Vec<_>>().join(", ")
}

/// `path/file.rs:LINE:COLUMN`, possibly followed by more text on the next line.
fn is_source_location(part: &str) -> bool {
    let first_line = part.lines().next().unwrap_or("").trim();
    let Some(at) = first_line.rfind(".rs:") else { return false };
    let numbers: Vec<&str> = first_line[at + 4..].split(':').collect();
    numbers.len() == 2 && numbers.iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Open a dataset, or explain in one line why not.
pub async fn open(uri: &str) -> Result<std::sync::Arc<lance::Dataset>, String> {
    if !uri.contains("://") && !std::path::Path::new(uri).exists() {
        return Err(format!("{uri}: no such path"));
    }
    lance::Dataset::open(uri)
        .await
        .map(std::sync::Arc::new)
        .map_err(|e| format!("{uri} is not a Lance dataset: {}", first_line(&e.to_string())))
}

pub fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::without_source_locations;

    #[test]
    fn lance_source_locations_are_dropped_from_user_messages() {
        let raw = "reading node:Person: LanceError(IO): Not found: /g/t.lance/data/x.lance, \
                   /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/lance-io-14.0.2/src/object_reader.rs:335:56, \
                   /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/ops/function.rs:250:5";
        assert_eq!(
            without_source_locations(raw),
            "reading node:Person: LanceError(IO): Not found: /g/t.lance/data/x.lance"
        );
        // Nothing else is touched: commas, versions, paths that are not source locations.
        let plain = "no branch named 'featur'; known branches: main, feature (v3, v4.rs:x)";
        assert_eq!(without_source_locations(plain), plain);
    }
}
