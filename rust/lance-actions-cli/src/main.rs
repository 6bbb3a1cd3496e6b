//! `lance-actions`: Lance transactions as actions, from the command line.

mod bench;
mod branch;
mod check;
mod conflicts;
mod demo;
mod explain;
mod failure;
mod graph;
mod input;
mod keyed;
mod matrix;
mod progress;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub use failure::{Failure, Kind};

#[derive(Parser)]
#[command(
    name = "lance-actions",
    version,
    about = "Lance transactions as actions: masks, rebase, three-way verdicts",
    after_help = failure::EXIT_CODES_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// An object-store option, KEY=VALUE, for every table the command opens (repeatable): the
    /// keys pylance's storage_options takes, e.g. aws_endpoint=http://127.0.0.1:9000,
    /// allow_http=true, aws_region=us-east-1. Keys not given come from the AWS_* environment.
    #[arg(long = "storage-option", global = true, value_name = "KEY=VALUE")]
    storage_option: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MatrixFormat {
    Md,
    Json,
}

/// The help text of `<URI>` wherever a command takes a table.
pub const URI_HELP: &str = "The Lance table: a local path or an object-store URI (s3://, gs://, az://, file://)";
/// The help text of `--json` wherever a command takes it.
pub const JSON_HELP: &str =
    "Print the result as one JSON object on stdout; errors too, as {\"error\": {\"kind\", \"message\"}}";

#[derive(Subcommand)]
enum Command {
    /// Print the conflict matrices derived from the action masks and rebases: operations (17 x 17)
    /// and actions.
    Matrix {
        /// `md`: the markdown of design/conflict-matrix.md; `json`: both matrices as one object.
        #[arg(long, value_enum, default_value = "md")]
        format: MatrixFormat,
        /// The same as `--format json`.
        #[arg(long)]
        json: bool,
    },
    /// Show each version's operation, its actions and their read/write masks.
    Explain {
        #[arg(help = URI_HELP)]
        uri: String,
        /// Show this version only (of the branch, with `--branch`).
        #[arg(long)]
        version: Option<u64>,
        /// Explain the versions of this branch (its `branch create` name) instead of main.
        #[arg(long)]
        branch: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Each version, newest first, with its writer, actions, the verdict history recorded by our
    /// commits, and provenance.
    Log {
        #[arg(help = URI_HELP)]
        uri: String,
        /// The history of this branch (its `branch create` name) instead of main's.
        #[arg(long)]
        branch: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Judge an uncommitted Lance transaction (.txn) against the versions committed after its
    /// read version: our verdict and reason next to Lance's own. Exit 0 ok, 4 retry, 5 fail.
    ///
    /// It needs the table the transaction was staged on (its new data files are already in that
    /// table, as `execute_uncommitted` leaves them) and the transaction in Lance's own encoding;
    /// the .txn file may be anywhere. A transaction already committed is reported as such.
    Check {
        #[arg(help = URI_HELP)]
        uri: String,
        /// The staged transaction: a `pb::Transaction` in Lance's encoding, as Lance writes
        /// under `<table>/_transactions/`.
        #[arg(long, value_name = "FILE")]
        txn: std::path::PathBuf,
        /// The transaction was staged on this branch (its `branch create` name), not main.
        #[arg(long)]
        branch: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Build a small dataset, stage conflicting and compatible transactions, print both verdicts.
    Demo {
        /// Keep the tables in this directory (the demo replaces its own previous output there);
        /// without it, a temporary directory removed at the end.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Keyed tables: create, strict insert, upsert, update, delete by key, and key migration.
    Keyed {
        #[command(subcommand)]
        command: keyed::KeyedCommand,
    },
    #[command(flatten)]
    Replay(branch::ReplayCommand),
    /// Logical branches: list (logical -> physical), create, delete, and reclaim retired ones.
    Branch {
        #[command(subcommand)]
        command: branch::BranchCommand,
    },
    /// Keyed graphs: init, branches, constraint-checked writes, three-way merge, export, log.
    Graph {
        #[command(subcommand)]
        command: graph::GraphCommand,
    },
    /// Benchmarks on your own storage, side by side with plain Lance: commit throughput, judging.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
}

/// A user-facing failure of a command that only prints lines.
pub type CliResult = Result<(), Failure>;

fn main() -> ExitCode {
    // A reader that stops early (`lance-actions log t | head`) closes the pipe: exit quietly as
    // other command-line tools do, instead of panicking on the next print. Rust ignores SIGPIPE by
    // default; restoring the default action is the whole fix, for every command at once.
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; only resets a signal disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let as_json = failure::json_requested(&args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e, as_json),
    };
    if let Err(e) = configure_storage(&cli.storage_option) {
        return report(Failure::new(Kind::Usage, e.to_string()), as_json);
    }
    let result = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(run(cli.command)),
        Err(e) => Err(Failure::new(Kind::Other, format!("cannot start the async runtime: {e}"))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(failure, as_json),
    }
}

/// `--storage-option` pairs apply to every uri this run opens (the library's prefix `""`).
fn configure_storage(pairs: &[String]) -> Result<(), lance_actions_commit::storage::StorageError> {
    if pairs.is_empty() {
        return Ok(());
    }
    let options = lance_actions_commit::storage::parse_pairs(pairs)?;
    lance_actions_commit::storage::configure("", options)
}

/// Print a failure (as JSON with `--json`) and give its exit code.
fn report(failure: Failure, as_json: bool) -> ExitCode {
    match failure {
        Failure::Message { kind, message } => {
            let message = without_source_locations(&message);
            if as_json {
                println!("{}", failure::error_json(kind, &message));
            } else {
                eprintln!("error: {message}");
            }
            ExitCode::from(kind.exit_code())
        }
        Failure::Reported { code } => ExitCode::from(code),
    }
}

/// Help and version print as clap prints them (exit 0); a usage error exits 2, as JSON with
/// `--json`.
fn usage_error(e: clap::Error, as_json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if informational || !as_json {
        // Printing can only fail on a closed stdout, where there is nobody left to tell.
        let _ = e.print();
        return ExitCode::from(if informational { 0 } else { Kind::Usage.exit_code() });
    }
    let text = e.to_string();
    let message = text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
    println!("{}", failure::error_json(Kind::Usage, &message));
    ExitCode::from(Kind::Usage.exit_code())
}

async fn run(command: Command) -> CliResult {
    match command {
        Command::Matrix { format, json } => {
            if json || format == MatrixFormat::Json {
                println!("{}", matrix::matrix_json());
            } else {
                print!("{}", lance_actions::matrix::render_markdown());
            }
            Ok(())
        }
        Command::Explain { uri, version, branch, json } => explain::run(&uri, branch.as_deref(), version, json).await,
        Command::Log { uri, branch, json } => explain::log(&uri, branch.as_deref(), json).await,
        Command::Check { uri, txn, branch, json } => check::run(&uri, branch.as_deref(), &txn, json).await,
        Command::Demo { dir, json } => demo::run(dir, json).await,
        Command::Keyed { command } => keyed::run(command).await,
        Command::Replay(command) => branch::run(command).await,
        Command::Branch { command } => branch::run_branch(command).await,
        Command::Graph { command } => graph::run(command).await,
        Command::Bench { command } => bench::run(command).await,
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

/// A local path that does not exist, in the same words for every command.
pub fn require_path(uri: &str) -> Result<(), Failure> {
    if !uri.contains("://") && !std::path::Path::new(uri).exists() {
        return Err(Failure::new(Kind::NoSuchPath, format!("{uri}: no such path")));
    }
    Ok(())
}

/// Open main of a dataset, or say in one line why not. Lance's own "not found" names the path
/// without its leading slash and with its source location: the user gets their own URI instead.
pub async fn open(uri: &str) -> Result<std::sync::Arc<lance::Dataset>, Failure> {
    require_path(uri)?;
    match lance_actions_commit::storage::open(uri).await {
        Ok(ds) => Ok(std::sync::Arc::new(ds)),
        Err(lance::Error::DatasetNotFound { .. }) => Err(not_a_dataset(uri)),
        Err(e) => Err(Failure::new(Kind::Other, format!("cannot open {uri}: {}", first_line(&e.to_string())))),
    }
}

/// The one wording of "this path holds no Lance table".
pub fn not_a_dataset(uri: &str) -> Failure {
    Failure::new(Kind::NotADataset, format!("{uri} is not a Lance dataset"))
}

/// Open a branch by its logical name (as `branch create` made it, or a plain Lance branch's own
/// name), resolved as the replay crate resolves names; `None` or "main" is main.
pub async fn open_branch(uri: &str, branch: Option<&str>) -> Result<std::sync::Arc<lance::Dataset>, Failure> {
    let root = open(uri).await?;
    let Some(name) = branch.filter(|b| *b != "main") else { return Ok(root) };
    let physical = lance_actions_commit::branch_names::resolve(&root, name).await.map_err(branch_failure)?;
    match physical {
        None => Ok(root),
        Some(physical) => root.checkout_branch(&physical).await.map(std::sync::Arc::new).map_err(|e| {
            Failure::new(Kind::Other, format!("cannot open branch '{name}': {}", first_line(&e.to_string())))
        }),
    }
}

/// A branch name that does not resolve, in the user's terms.
pub fn branch_failure(e: lance_actions_commit::branch_names::BranchError) -> Failure {
    use lance_actions_commit::branch_names::BranchError;
    let kind = match e {
        BranchError::NoSuchBranch { .. } => Kind::NoSuchBranch,
        _ => Kind::Other,
    };
    Failure::new(kind, first_line(&e.to_string()))
}

pub fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::without_source_locations;

    /// Every command says what it does, and every option and argument of every command has help
    /// text: a new flag without a doc comment fails here.
    #[test]
    fn every_command_option_and_argument_has_help_text() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() && cmd.get_name() != "lance-actions" {
                missing.push(format!("{path}: no about"));
            }
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        let cli = super::Cli::command();
        walk(&cli, "", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
        let mut count = 0;
        fn count_args(cmd: &clap::Command, n: &mut usize) {
            *n += cmd.get_arguments().count();
            cmd.get_subcommands().for_each(|s| count_args(s, n));
        }
        count_args(&cli, &mut count);
        assert!(count > 100, "the walk reached every command: {count} arguments");
    }

    /// Every command takes `--json` (so a script gets one JSON object, errors included), from
    /// `matrix` to `graph export`.
    #[test]
    fn every_command_takes_json() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            let leaves: Vec<_> = cmd.get_subcommands().filter(|s| s.get_name() != "help").collect();
            if leaves.is_empty() && !cmd.get_arguments().any(|a| a.get_id() == "json") {
                missing.push(path.clone());
            }
            leaves.into_iter().for_each(|s| walk(s, &path, missing));
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "without --json: {missing:#?}");
    }

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
