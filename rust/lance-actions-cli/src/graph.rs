//! `lance-actions graph ...`: keyed graphs with a three-way merge (`design/graph-merge.md`).
//!
//! Conflicts and constraint violations exit 3 with the list as data (`--json`) or as lines.

use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};
use lance_actions_graph::{
    Conflict, Error, Graph, MergeOptions, MergeReport, Outcome, Row, Strategy, row_from_json, row_to_json,
    rows_from_batch,
};
use serde_json::{Value as Json, json};

use crate::Kind as FailureKind;
use crate::input::{Format, json_lines, read_batches};
use crate::progress::Activity;
use crate::{Failure, JSON_HELP, first_line};

/// The help text of `<ROOT>`.
const ROOT_HELP: &str = "The graph: the directory `graph init` created (a local path or an object-store URI)";

#[derive(Subcommand)]
pub enum GraphCommand {
    /// Create a graph: one keyed table per type of the schema file, and the graph manifest.
    Init {
        /// Where to create the graph: a directory that will hold one Lance table per type.
        root: String,
        /// The schema: node and edge types with their properties, as JSON.
        #[arg(long, value_name = "FILE")]
        schema: PathBuf,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Graph branches: create, list.
    Branch {
        #[command(subcommand)]
        command: BranchCommand,
    },
    /// Strict insert: every id must be new.
    Insert(WriteArgs),
    /// Insert new ids, replace present ones.
    Upsert(WriteArgs),
    /// Delete by id (rows holding at least `id`).
    Delete(WriteArgs),
    /// Three-way merge of graph branch FROM into INTO.
    Merge {
        #[arg(help = ROOT_HELP)]
        root: String,
        /// The graph branch whose changes are merged.
        #[arg(long)]
        from: String,
        /// The graph branch that receives them.
        #[arg(long)]
        into: String,
        /// Plan and report the outcome; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long, help = JSON_HELP)]
        json: bool,
        /// Merge an id updated on both sides property by property.
        #[arg(long)]
        cells: bool,
        /// An id changed differently on both sides: `fail` reports it (exit 3), `ours` keeps INTO's
        /// row, `theirs` takes FROM's.
        #[arg(long, value_enum, default_value = "fail")]
        strategy: StrategyArg,
    },
    /// Every row of a type as JSON lines, ordered by id.
    Export {
        #[arg(help = ROOT_HELP)]
        root: String,
        /// The node or edge type to export.
        #[arg(long = "type")]
        type_name: String,
        /// The graph branch to read (default main).
        #[arg(long)]
        branch: Option<String>,
        /// Print one JSON object, {"type", "branch", "rows": [...]}, instead of one row per line;
        /// errors too, as {"error": {"kind", "message"}}.
        #[arg(long)]
        json: bool,
    },
    /// Build a BTree index on `id` in every table of a branch (one graph version), so writes and
    /// merges take Lance's indexed paths.
    Index {
        #[arg(help = ROOT_HELP)]
        root: String,
        /// The graph branch to index (default main).
        #[arg(long)]
        branch: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Graph versions reachable from a branch, newest first: parents and tables.
    Log {
        #[arg(help = ROOT_HELP)]
        root: String,
        /// The graph branch whose history is shown (default main).
        #[arg(long)]
        branch: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum BranchCommand {
    /// Create a graph branch from another.
    Create {
        #[arg(help = ROOT_HELP)]
        root: String,
        /// The new graph branch's name.
        name: String,
        /// The graph branch it starts from.
        #[arg(long, default_value = "main")]
        from: String,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Every graph branch with its head graph version.
    List {
        #[arg(help = ROOT_HELP)]
        root: String,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

#[derive(clap::Args)]
pub struct WriteArgs {
    #[arg(help = ROOT_HELP)]
    root: String,
    /// The node or edge type the rows are of.
    #[arg(long = "type")]
    type_name: String,
    /// The rows, each with a string `id`: JSON lines, Arrow IPC file (.arrow) or stream
    /// (.arrows), or Parquet.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// The graph branch to write (default main).
    #[arg(long)]
    branch: Option<String>,
    #[arg(long, help = JSON_HELP)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum StrategyArg {
    /// Report the conflict; write nothing.
    Fail,
    /// Keep the target's (INTO's) row.
    Ours,
    /// Take the source's (FROM's) row.
    Theirs,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Insert,
    Upsert,
    Delete,
}

pub async fn run(command: GraphCommand) -> Result<(), Failure> {
    match command {
        GraphCommand::Init { root, schema, json } => init(&root, &schema, json).await,
        GraphCommand::Branch { command: BranchCommand::Create { root, name, from, json } } => {
            open(&root).await?.branch(&name, &from).await.map_err(message)?;
            if json {
                println!("{}", json!({"op": "branch_create", "branch": name, "from": from}));
            } else {
                println!("created graph branch '{name}' from '{from}'");
            }
            Ok(())
        }
        GraphCommand::Branch { command: BranchCommand::List { root, json } } => {
            let branches = open(&root).await?.branches().await.map_err(message)?;
            if json {
                let list: Vec<Json> = branches.iter().map(|(b, head)| json!({"branch": b, "head": head})).collect();
                println!("{}", json!({"root": root, "branches": list}));
            } else {
                branches.iter().for_each(|(b, head)| println!("{b}\t{head}"));
            }
            Ok(())
        }
        GraphCommand::Insert(args) => write(Kind::Insert, args).await,
        GraphCommand::Upsert(args) => write(Kind::Upsert, args).await,
        GraphCommand::Delete(args) => write(Kind::Delete, args).await,
        GraphCommand::Merge { root, from, into, dry_run, json, cells, strategy } => {
            let strategy = match strategy {
                StrategyArg::Fail => Strategy::Fail,
                StrategyArg::Ours => Strategy::Ours,
                StrategyArg::Theirs => Strategy::Theirs,
            };
            let graph = open(&root).await?;
            let activity = Activity::start(format!("merging graph branch '{from}' into '{into}'"), json);
            let opts = MergeOptions { dry_run, cells, strategy, progress: activity.progress() };
            let report = graph.merge(&from, &into, &opts).await.map_err(message);
            drop(activity);
            let report = report?;
            print_merge(&report, &from, &into, &opts, json);
            if report.outcome == Outcome::Conflicted { Err(Failure::Reported { code: 3 }) } else { Ok(()) }
        }
        GraphCommand::Export { root, type_name, branch, json } => {
            let g = open(&root).await?;
            let t = g.schema().get(&type_name).map_err(message)?.clone();
            let branch = branch.unwrap_or_else(|| "main".into());
            let rows = g.scan(&branch, &type_name).await.map_err(message)?;
            if json {
                let rows: Vec<Json> = rows.iter().map(|row| row_to_json(&t, row)).collect();
                println!("{}", json!({"type": t.key(), "branch": branch, "rows": rows}));
            } else {
                rows.iter().for_each(|row| println!("{}", row_to_json(&t, row)));
            }
            Ok(())
        }
        GraphCommand::Index { root, branch, json } => {
            let branch = branch.unwrap_or_else(|| "main".into());
            let report = open(&root).await?.index_keys(&branch).await.map_err(message)?;
            if json {
                println!("{}", json!({"op": "index", "branch": branch, "commit": report.commit}));
            } else {
                println!("indexed id in every table of '{branch}': graph version {}", report.commit);
            }
            Ok(())
        }
        GraphCommand::Log { root, branch, json } => {
            let branch = branch.unwrap_or_else(|| "main".into());
            let log = open(&root).await?.log(&branch).await.map_err(message)?;
            if json {
                let commits: Vec<Json> = log.iter().map(|c| c.to_json()).collect();
                println!("{}", json!({"root": root, "branch": branch, "commits": commits}));
                return Ok(());
            }
            for c in log {
                let tables: Vec<String> =
                    c.tables.iter().map(|(t, r)| format!("{t}@{}:v{}", r.branch, r.version)).collect();
                println!("{} parents=[{}] {}", c.id, c.parents.join(","), tables.join(" "));
            }
            Ok(())
        }
    }
}

/// A graph library error in one line, with the kind its exit code follows.
fn message(e: Error) -> Failure {
    let kind = match &e {
        Error::Input { .. } | Error::UnknownType { .. } => FailureKind::Input,
        Error::NoSuchBranch { .. } => FailureKind::NoSuchBranch,
        Error::Contention { .. } => FailureKind::Retry,
        // A keyed write's own retryable refusals are retryable here too.
        Error::Keyed {
            source:
                lance_actions_keyed::Error::Contention { .. }
                | lance_actions_keyed::Error::AddressesOutdated { .. }
                | lance_actions_keyed::Error::SchemaChanged { .. },
        } => FailureKind::Retry,
        Error::Commit { source } => crate::keyed::commit_kind(source),
        _ => FailureKind::Other,
    };
    Failure::new(kind, first_line(&e.to_string()))
}

async fn open(root: &str) -> Result<Graph, Failure> {
    crate::require_path(root)?;
    Graph::open(root).await.map_err(message)
}

async fn init(root: &str, schema: &Path, as_json: bool) -> Result<(), Failure> {
    let text = std::fs::read_to_string(schema)
        .map_err(|e| Failure::input(format!("{}: {}", schema.display(), first_line(&e.to_string()))))?;
    let g = Graph::init(root, &text).await.map_err(message)?;
    let types: Vec<String> = g.schema().types.values().map(|t| t.key()).collect();
    if as_json {
        println!("{}", json!({"op": "init", "root": root, "types": types}));
    } else {
        println!("created graph {root} with {}", types.join(", "));
    }
    Ok(())
}

async fn write(kind: Kind, args: WriteArgs) -> Result<(), Failure> {
    let g = open(&args.root).await?;
    let t = g.schema().get(&args.type_name).map_err(message)?.clone();
    let branch = args.branch.as_deref().unwrap_or("main");
    let result = if kind == Kind::Delete {
        let ids = read_ids(&args.input)?;
        let n = ids.len();
        g.delete(branch, &t.name, ids).await.map(|r| (r, n))
    } else {
        let rows = read_rows(&t, &args.input)?;
        let n = rows.len();
        let r = if kind == Kind::Insert {
            g.insert(branch, &t.name, rows).await
        } else {
            g.upsert(branch, &t.name, rows).await
        };
        r.map(|r| (r, n))
    };
    let op = match kind {
        Kind::Insert => "insert",
        Kind::Upsert => "upsert",
        Kind::Delete => "delete",
    };
    match result {
        Ok((report, rows)) => {
            if args.json {
                println!(
                    "{}",
                    json!({"op": op, "type": t.key(), "branch": branch, "rows": rows, "commit": report.commit})
                );
            } else {
                println!("{op} {rows} row(s) of {} on '{branch}': graph version {}", t.key(), report.commit);
            }
            Ok(())
        }
        Err(Error::Violations { conflicts }) => {
            print_conflicts(&conflicts, args.json, json!({"op": op, "outcome": "refused"}));
            Err(Failure::Reported { code: 3 })
        }
        Err(e @ Error::AlreadyPresent { .. }) => {
            if args.json {
                let error = json!({"kind": "key_conflict", "message": e.to_string()});
                println!("{}", json!({"op": op, "outcome": "refused", "error": error}));
            } else {
                eprintln!("error: {e}");
            }
            Err(Failure::Reported { code: 3 })
        }
        Err(e) => Err(message(e)),
    }
}

fn print_conflicts(conflicts: &[Conflict], as_json: bool, mut head: Json) {
    if as_json {
        head["conflicts"] = Json::Array(conflicts.iter().map(Conflict::to_json).collect());
        println!("{head}");
    } else {
        for c in conflicts {
            println!("{}\t{}\t{}\t{}", c.kind.label(), c.type_key, c.id, c.message);
        }
    }
}

/// What the merge wrote, counted: "; 3 row(s) written (node:Person 2, edge:Knows 1), graph version X".
fn written_phrase(r: &MergeReport, dry_run: bool) -> String {
    let total: usize = r.written.values().sum();
    if total == 0 && r.adopted.is_empty() {
        return String::new();
    }
    let per_type: Vec<String> = r.written.iter().filter(|(_, n)| **n > 0).map(|(t, n)| format!("{t} {n}")).collect();
    let verb = if dry_run { "would write" } else { "written" };
    let mut out = format!("; {total} row(s) {verb}");
    if !per_type.is_empty() {
        out.push_str(&format!(" ({})", per_type.join(", ")));
    }
    if !r.adopted.is_empty() {
        out.push_str(&format!("; {} taken from the source as it is (no rows rewritten)", r.adopted.join(", ")));
    }
    if let Some(commit) = r.commit.as_ref().filter(|_| !dry_run) {
        out.push_str(&format!(", graph version {commit}"));
    }
    out
}

/// What would resolve the conflicts of a graph merge. Merging again as it is meets the same rows,
/// so it never says "retry": row conflicts (an id changed differently on both sides) have a
/// strategy that picks a side, `--cells` merges updates of different properties, and constraint
/// violations of the merged graph are resolved on a branch only.
fn merge_resolution(conflicts: &[Conflict], from: &str, into: &str, cells: bool) -> String {
    let rows = conflicts.iter().filter(|c| c.kind.is_row_conflict()).count();
    let violations = conflicts.len() - rows;
    let on_branch = format!("resolve on '{from}' (or on '{into}'), then merge again");
    let mut out = Vec::new();
    if rows > 0 {
        let updates = conflicts.iter().any(|c| c.kind == lance_actions_graph::ConflictKind::DivergentUpdate);
        let cells = if updates && !cells { "; --cells merges updates of different properties" } else { "" };
        out.push(format!(
            "{rows} row conflict(s): --strategy ours keeps the rows of '{into}', --strategy theirs takes those of \
             '{from}'{cells}; \
             or {on_branch}"
        ));
    }
    if violations > 0 {
        out.push(format!(
            "{violations} constraint violation(s) of the merged graph: no strategy removes them; {on_branch}"
        ));
    }
    out.join("; ")
}

fn print_merge(r: &MergeReport, from: &str, into: &str, opts: &MergeOptions, as_json: bool) {
    let resolution = (r.outcome == Outcome::Conflicted).then(|| merge_resolution(&r.conflicts, from, into, opts.cells));
    let dry_run = opts.dry_run;
    if as_json {
        let head = json!({
            "outcome": r.outcome.label(), "from": from, "into": into, "dry_run": dry_run, "base": r.base,
            "commit": r.commit, "examined": r.examined, "written": r.written, "adopted": r.adopted,
            "resolution": resolution,
        });
        print_conflicts(&r.conflicts, true, head);
        return;
    }
    match r.outcome {
        Outcome::Conflicted => {
            println!("merge of '{from}' into '{into}': {} conflict(s), nothing written", r.conflicts.len());
            print_conflicts(&r.conflicts, false, Json::Null);
            println!("{}", resolution.unwrap_or_default());
        }
        other => println!(
            "merge of '{from}' into '{into}': {}{}{}",
            other.label(),
            written_phrase(r, dry_run),
            if dry_run { " (dry run, nothing written)" } else { "" }
        ),
    }
}

fn read_rows(t: &lance_actions_graph::TypeDef, path: &Path) -> Result<Vec<Row>, Failure> {
    let format = Format::of(path)?;
    if format.is_batches() {
        let mut rows = Vec::new();
        for b in read_batches(path, format)? {
            rows.extend(rows_from_batch(t, &b).map_err(message)?);
        }
        return Ok(rows);
    }
    json_lines(path)?.into_iter().map(|(line, v)| row_from_json(t, &Json::Object(v), line).map_err(message)).collect()
}

fn read_ids(path: &Path) -> Result<Vec<String>, Failure> {
    let missing = |at: String| Failure::input(format!("{}: {at}: a delete needs a string 'id'", path.display()));
    let format = Format::of(path)?;
    if format.is_batches() {
        let mut ids = Vec::new();
        for b in read_batches(path, format)? {
            let col = b.column_by_name("id").ok_or_else(|| missing("column 'id'".into()))?;
            let strings = lance::deps::arrow_array::cast::AsArray::as_string_opt::<i32>(col.as_ref())
                .ok_or_else(|| missing("column 'id'".into()))?;
            ids.extend(strings.iter().map(|s| s.map(String::from).unwrap_or_default()));
        }
        return Ok(ids);
    }
    json_lines(path)?
        .iter()
        .map(|(line, v)| {
            v.get("id").and_then(Json::as_str).map(String::from).ok_or_else(|| missing(format!("line {line}")))
        })
        .collect()
}
