//! `lance-actions graph ...`: keyed graphs with a three-way merge (`design/graph-merge.md`).
//!
//! Conflicts and constraint violations exit 3 with the list as data (`--json`) or as lines.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};
use lance_actions_graph::{
    Conflict, Error, Graph, MergeOptions, MergeReport, Outcome, Row, Strategy, row_from_json, row_to_json,
    rows_from_batch,
};
use serde_json::{Value as Json, json};

use crate::{Failure, first_line};

#[derive(Subcommand)]
pub enum GraphCommand {
    /// Create a graph: one keyed table per type of the schema file, and the graph manifest.
    Init {
        root: String,
        #[arg(long)]
        schema: PathBuf,
        #[arg(long)]
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
        root: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        into: String,
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
        /// Merge an id updated on both sides property by property.
        #[arg(long)]
        cells: bool,
        #[arg(long, value_enum, default_value = "fail")]
        strategy: StrategyArg,
    },
    /// Every row of a type as JSON lines, ordered by id.
    Export {
        root: String,
        #[arg(long = "type")]
        type_name: String,
        #[arg(long)]
        branch: Option<String>,
    },
    /// Build a BTree index on `id` in every table of a branch (one graph version), so writes and
    /// merges take Lance's indexed paths.
    Index {
        root: String,
        #[arg(long)]
        branch: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Graph versions reachable from a branch, newest first: parents and tables.
    Log {
        root: String,
        #[arg(long)]
        branch: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum BranchCommand {
    Create {
        root: String,
        name: String,
        #[arg(long, default_value = "main")]
        from: String,
        #[arg(long)]
        json: bool,
    },
    List {
        root: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
pub struct WriteArgs {
    root: String,
    #[arg(long = "type")]
    type_name: String,
    /// JSON lines or Arrow IPC.
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    branch: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum StrategyArg {
    Fail,
    Ours,
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
                println!("{}", Json::Array(list));
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
            let opts = MergeOptions { dry_run, cells, strategy };
            let report = open(&root).await?.merge(&from, &into, &opts).await.map_err(message)?;
            print_merge(&report, &from, &into, dry_run, json);
            if report.outcome == Outcome::Conflicted { Err(Failure::Reported { code: 3 }) } else { Ok(()) }
        }
        GraphCommand::Export { root, type_name, branch } => {
            let g = open(&root).await?;
            let t = g.schema().get(&type_name).map_err(message)?.clone();
            for row in g.scan(branch.as_deref().unwrap_or("main"), &type_name).await.map_err(message)? {
                println!("{}", row_to_json(&t, &row));
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
            for c in log {
                if json {
                    println!("{}", c.to_json());
                } else {
                    let tables: Vec<String> =
                        c.tables.iter().map(|(t, r)| format!("{t}@{}:v{}", r.branch, r.version)).collect();
                    println!("{} parents=[{}] {}", c.id, c.parents.join(","), tables.join(" "));
                }
            }
            Ok(())
        }
    }
}

fn message(e: Error) -> Failure {
    Failure::Message(first_line(&e.to_string()).to_string())
}

async fn open(root: &str) -> Result<Graph, Failure> {
    Graph::open(root).await.map_err(message)
}

async fn init(root: &str, schema: &Path, as_json: bool) -> Result<(), Failure> {
    let text = std::fs::read_to_string(schema)
        .map_err(|e| Failure::Message(format!("{}: {}", schema.display(), first_line(&e.to_string()))))?;
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
                println!("{}", json!({"op": op, "outcome": "refused", "error": e.to_string()}));
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

fn print_merge(r: &MergeReport, from: &str, into: &str, dry_run: bool, as_json: bool) {
    if as_json {
        let head = json!({
            "outcome": r.outcome.label(), "from": from, "into": into, "dry_run": dry_run, "base": r.base,
            "commit": r.commit, "examined": r.examined, "written": r.written, "adopted": r.adopted,
        });
        print_conflicts(&r.conflicts, true, head);
        return;
    }
    match r.outcome {
        Outcome::Conflicted => {
            println!("merge of '{from}' into '{into}': {} conflict(s), nothing written", r.conflicts.len());
            print_conflicts(&r.conflicts, false, Json::Null);
        }
        other => println!(
            "merge of '{from}' into '{into}': {}{}",
            other.label(),
            if dry_run { " (dry run, nothing written)" } else { "" }
        ),
    }
}

fn open_file(path: &Path) -> Result<File, Failure> {
    File::open(path).map_err(|e| Failure::Message(format!("{}: {}", path.display(), first_line(&e.to_string()))))
}

fn is_ipc(path: &Path) -> Result<bool, Failure> {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let mut head = Vec::with_capacity(6);
    open_file(path)?
        .take(6)
        .read_to_end(&mut head)
        .map_err(|e| Failure::Message(format!("{}: {e}", path.display())))?;
    Ok(matches!(ext.as_deref(), Some("arrow" | "ipc")) || head == b"ARROW1")
}

fn read_ipc(path: &Path) -> Result<Vec<lance::deps::arrow_array::RecordBatch>, Failure> {
    let bad = |e: lance::deps::arrow_schema::ArrowError| {
        Failure::Message(format!("{} is not readable as Arrow IPC: {}", path.display(), first_line(&e.to_string())))
    };
    let mut head = Vec::with_capacity(6);
    open_file(path)?.take(6).read_to_end(&mut head).map_err(|e| Failure::Message(e.to_string()))?;
    if head == b"ARROW1" {
        arrow_ipc::reader::FileReader::try_new_buffered(open_file(path)?, None)
            .map_err(bad)?
            .collect::<Result<_, _>>()
            .map_err(bad)
    } else {
        arrow_ipc::reader::StreamReader::try_new_buffered(open_file(path)?, None)
            .map_err(bad)?
            .collect::<Result<_, _>>()
            .map_err(bad)
    }
}

/// JSON lines, one object per non-blank line.
fn json_lines(path: &Path) -> Result<Vec<(usize, Json)>, Failure> {
    let mut out = Vec::new();
    for (i, line) in BufReader::new(open_file(path)?).lines().enumerate() {
        let line = line.map_err(|e| Failure::Message(format!("{}: {e}", path.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(&line)
            .map_err(|e| Failure::Message(format!("{} line {}: not JSON: {e}", path.display(), i + 1)))?;
        out.push((i + 1, value));
    }
    Ok(out)
}

fn read_rows(t: &lance_actions_graph::TypeDef, path: &Path) -> Result<Vec<Row>, Failure> {
    if is_ipc(path)? {
        let mut rows = Vec::new();
        for b in read_ipc(path)? {
            rows.extend(rows_from_batch(t, &b).map_err(message)?);
        }
        return Ok(rows);
    }
    json_lines(path)?.iter().map(|(line, v)| row_from_json(t, v, *line).map_err(message)).collect()
}

fn read_ids(path: &Path) -> Result<Vec<String>, Failure> {
    let missing =
        |line: usize| Failure::Message(format!("{} line {line}: a delete needs a string 'id'", path.display()));
    if is_ipc(path)? {
        let mut ids = Vec::new();
        for b in read_ipc(path)? {
            let col = b.column_by_name("id").ok_or_else(|| missing(1))?;
            let strings = lance::deps::arrow_array::cast::AsArray::as_string_opt::<i32>(col.as_ref())
                .ok_or_else(|| missing(1))?;
            ids.extend(strings.iter().map(|s| s.map(String::from).unwrap_or_default()));
        }
        return Ok(ids);
    }
    json_lines(path)?
        .iter()
        .map(|(line, v)| v.get("id").and_then(Json::as_str).map(String::from).ok_or_else(|| missing(*line)))
        .collect()
}
