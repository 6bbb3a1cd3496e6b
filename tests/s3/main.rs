//! Every layer on object storage: the commit loop, keyed fencing, branch replay with logical names,
//! the graph merge and the faults of a remote store, against a real S3-compatible server (moto,
//! installed by `scripts/setup.sh`) that this binary starts on a loopback port and stops after.
//!
//! Its own harness (`harness = false`): the server's endpoint and credentials reach Lance the way
//! they reach pylance and every AWS SDK, through the standard environment (`AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, ...), and the environment can only be set safely before any thread reads
//! it, which a libtest binary does not allow. Writer processes are this same binary run as
//! `s3 child <role> ...`; a child is never counted as a test, and a test that spawns one checks the
//! child's report file, so a child that did nothing fails its test.
//!
//! `cargo test --test s3` runs it alone; `cargo test --test s3 -- NAME` runs the tests whose name
//! contains NAME; `cargo nextest run` runs each test in a process of its own, with a server of its
//! own (moto is one Python process: separate servers let tests that wait on it run side by side).

mod cli;
mod commit;
mod faults;
mod graph;
mod keyed;
mod replay;
mod requests;
mod server;
mod support;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Instant;

use server::S3;

/// What a test gets: the running server and a fresh bucket of its own.
pub struct Ctx<'a> {
    pub s3: &'a S3,
    pub bucket: String,
}

impl Ctx<'_> {
    /// `s3://<bucket>/<name>`
    pub fn uri(&self, name: &str) -> String {
        format!("s3://{}/{name}", self.bucket)
    }
}

type TestFn = for<'a> fn(&'a Ctx<'a>) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

macro_rules! tests {
    ($($module:ident :: $name:ident),* $(,)?) => {
        &[$((concat!(stringify!($module), "::", stringify!($name)), |cx| Box::pin($module::$name(cx)))),*]
    };
}

const TESTS: &[(&str, TestFn)] = tests![
    commit::four_processes_commit_mixed_writes_on_s3_without_losing_or_resurrecting_rows,
    keyed::eight_processes_racing_strict_inserts_on_s3_leave_one_row_per_key,
    replay::a_branch_made_by_pylance_on_s3_merges_by_logical_name_copying_no_data,
    replay::rebase_and_squash_on_s3_graft_bases_across_prefixes,
    graph::a_graph_on_s3_merges_three_ways,
    faults::a_stopped_server_gives_typed_errors_and_the_next_commit_lands,
    faults::a_lost_manifest_response_lands_once,
    faults::a_retried_manifest_write_meeting_its_own_object_lands_once,
    cli::the_cli_reaches_s3_through_storage_options_alone,
    requests::an_uncontended_commit_makes_lances_own_requests,
    requests::an_append_behind_writers_costs_what_lances_commit_costs,
    requests::a_delete_behind_deletes_of_its_fragment_costs_about_what_lances_commit_costs,
    requests::a_delete_we_staged_behind_deletes_of_its_fragment_makes_exactly_lances_requests,
    requests::a_delete_behind_deletes_of_another_fragment_reads_no_deletion_file,
    requests::an_append_whose_put_was_lost_stands_where_it_stood_on_an_ordered_store,
];

/// The part of libtest's command line that cargo and nextest use: `--list [--format terse]`,
/// `--ignored`, `--exact`, `--skip NAME`, name filters; other flags (`--nocapture`, `--test-threads N`, ...) are
/// accepted and ignored. nextest lists with `--list --format terse [--ignored]` and runs each test as
/// `s3 NAME --exact --nocapture`, a process (and a server) of its own.
#[derive(Debug, Default)]
struct Cli {
    list: bool,
    ignored: bool,
    exact: bool,
    filters: Vec<String>,
    skips: Vec<String>,
}

impl Cli {
    /// Flags that take a value: their value is not a name filter. (`--skip NAME` excludes NAME.)
    const WITH_VALUE: &[&str] = &["--format", "--test-threads", "--color", "-Z", "--logfile", "--shuffle-seed"];

    fn parse(args: &[String]) -> Cli {
        let mut cli = Cli::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--list" => cli.list = true,
                "--ignored" => cli.ignored = true,
                "--exact" => cli.exact = true,
                "--skip" => cli.skips.extend(args.next().cloned()),
                flag if Self::WITH_VALUE.contains(&flag) => {
                    args.next();
                }
                flag if flag.starts_with('-') => {}
                name => cli.filters.push(name.to_string()),
            }
        }
        cli
    }

    fn selects(&self, name: &str) -> bool {
        let matches = |f: &String| if self.exact { name == f } else { name.contains(f.as_str()) };
        (self.filters.is_empty() || self.filters.iter().any(matches)) && !self.skips.iter().any(matches)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        return support::child_main(&args[2..]);
    }
    let cli = Cli::parse(&args[1..]);
    // Nothing here is ignored: `--ignored` lists and runs no test.
    let chosen: Vec<&(&str, TestFn)> = TESTS.iter().filter(|(name, _)| !cli.ignored && cli.selects(name)).collect();
    if cli.list {
        for (name, _) in &chosen {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let started = Instant::now();
    if chosen.is_empty() {
        // No server for no test (`--ignored`, or a filter that matches nothing here).
        println!(
            "\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; {} filtered out; finished in 0.00s\n",
            TESTS.len()
        );
        return ExitCode::SUCCESS;
    }
    let s3 = match S3::start() {
        Ok(s3) => s3,
        Err(e) => {
            eprintln!("could not start the local S3 server: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (key, value) in s3.env() {
        // SAFETY: no thread of this process reads the environment yet: the only threads are the
        // relay's, which do socket IO only, and the async runtime is built below.
        unsafe { std::env::set_var(key, value) };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("could not build the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("\nrunning {} tests (S3 server at {})", chosen.len(), s3.endpoint);
    let mut failed = Vec::new();
    for (i, (name, test)) in chosen.iter().enumerate() {
        let bucket = format!("la-test-{i}-{}", std::process::id());
        if let Err(e) = s3.create_bucket(&bucket) {
            println!("test {name} ... FAILED ({e})");
            failed.push(*name);
            continue;
        }
        let cx = Ctx { s3: &s3, bucket };
        let t = Instant::now();
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on(test(&cx))));
        match outcome {
            Ok(()) => println!("test {name} ... ok ({:.1} s)", t.elapsed().as_secs_f64()),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    let passed = chosen.len() - failed.len();
    let verdict = if failed.is_empty() { "ok" } else { "FAILED" };
    if !failed.is_empty() {
        println!("\nfailures:\n    {}", failed.join("\n    "));
    }
    println!(
        "\ntest result: {verdict}. {passed} passed; {} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        failed.len(),
        TESTS.len() - chosen.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
