//! How a command fails: a kind (which decides the exit code and the JSON `kind`) and one line in
//! the user's terms. `main` prints it on stderr, or with `--json` as `{"error": {...}}` on stdout,
//! so a script reading stdout always gets one JSON object.

use serde_json::json;

/// The exit codes, as `--help` and the README list them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  ok (check: the verdict is ok, or the transaction is already committed)
  1  an error: no such path, not a Lance dataset, unreadable input, Lance I/O
  2  usage: an unknown command or option, a missing or invalid argument
  3  conflict: a key conflict, a conflicted merge/replay, a graph conflict or
     constraint violation; nothing was written (a replay a concurrent writer
     stopped part way keeps what landed before, and says so)
  4  retry: check's verdict is retry; a commit gave up after other writers kept landing
  5  fail: check's verdict is fail; a commit was refused as incompatible
  6  fast-forward refused: the target has commits of its own since the fork
  7  lost a race: another rebase, squash or delete changed the branch this command
     was working on; a rebase or squash leaves nothing behind: run it again

With --json, results and errors are JSON on stdout; an error is
{\"error\": {\"kind\": ..., \"message\": ...}}.";

/// What went wrong, in the categories scripts branch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Usage,
    NoSuchPath,
    NotADataset,
    /// An input file (rows, schema, .txn) that cannot be read as what it should be.
    Input,
    NoSuchBranch,
    Conflict,
    Retry,
    Fail,
    NotFastForward,
    LostRace,
    Other,
}

impl Kind {
    pub fn exit_code(self) -> u8 {
        match self {
            Kind::Usage => 2,
            Kind::Conflict => 3,
            Kind::Retry => 4,
            Kind::Fail => 5,
            Kind::NotFastForward => 6,
            Kind::LostRace => 7,
            Kind::NoSuchPath | Kind::NotADataset | Kind::Input | Kind::NoSuchBranch | Kind::Other => 1,
        }
    }

    /// The `kind` of a JSON error.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Usage => "usage",
            Kind::NoSuchPath => "no_such_path",
            Kind::NotADataset => "not_a_dataset",
            Kind::Input => "input",
            Kind::NoSuchBranch => "no_such_branch",
            Kind::Conflict => "conflict",
            Kind::Retry => "retry",
            Kind::Fail => "fail",
            Kind::NotFastForward => "not_fast_forward",
            Kind::LostRace => "lost_race",
            Kind::Other => "other",
        }
    }
}

/// Why a command failed: a message for `main` to print, or a report the command already printed
/// (a conflict listed as data), with its exit code.
#[derive(Debug)]
pub enum Failure {
    Message { kind: Kind, message: String },
    Reported { code: u8 },
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Failure::Message { kind, message: message.into() }
    }

    pub fn input(message: impl Into<String>) -> Self {
        Failure::new(Kind::Input, message)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::new(Kind::Other, message)
    }
}

/// The JSON form of an error: `{"error": {"kind": ..., "message": ...}}`.
pub fn error_json(kind: Kind, message: &str) -> serde_json::Value {
    json!({"error": {"kind": kind.label(), "message": message}})
}

/// Did the user ask for JSON? Read from the raw arguments rather than the parsed command, so that
/// a usage error (which never parses) is JSON too. Arguments after `--` are operands, not flags.
pub fn json_requested(args: &[std::ffi::OsString]) -> bool {
    args.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "--json")
}

/// The exit code of a verdict label ("ok", "retry", "fail").
pub fn verdict_exit_code(label: &str) -> u8 {
    match label {
        "ok" => 0,
        "retry" => Kind::Retry.exit_code(),
        _ => Kind::Fail.exit_code(),
    }
}
