//! Scenario files (`tests/scenarios/*.txt`): one replica at a time, the inputs it is given, and
//! the exact actions it takes after each, in a canonical one-line-per-action text form. The
//! runner parses and runs every file and compares; `TAGMA_REWRITE=1 cargo test -p tagma-core
//! --test consensus scenarios` writes what the replica did into the files instead, so a new
//! case is a new file: write its commands, run with the variable, read and check what it
//! wrote, commit.
//!
//! # Format
//!
//! Lines starting with `#`, and blank lines, are comments. Every other line is a command
//! (`name key=value flag …`), followed by a line `----` and the expected output, which ends at
//! the next blank line (or the end of the file):
//!
//! ```text
//! # A BFT follower writes what the leader proposes.
//! replica mode=bft n=4 me=1
//! ----
//! (no actions)
//!
//! batch v ts=3 requests=1.1,2.1
//! ----
//! ok
//!
//! propose at=3 from=0 cid=0 batch=v
//! ----
//! Broadcast WRITE cid=0 epoch=0 hash=v
//! ```
//!
//! Commands (`at=T` sets the time of an input; it stays until the next `at`, and a new replica
//! starts at 0 unless given one):
//! - `replica mode=bft|cft n=N me=M [durable] [state-vote=on|off] [view=V] [start=fresh|recovered]
//!   [at=T]`: a new replica (a durable one `start=recovered` from an empty disk); prints the
//!   actions it starts with.
//! - `batch NAME ts=T requests=C.S,… [bytes=B]`: names a batch (requests `C.S`: client C's
//!   request S, of B payload bytes, 8 by default). Hashes and batches print by name; a batch the
//!   replica proposes gets the next name `P1`, `P2`, … (printed with its content when new), and
//!   inputs may use it.
//! - Inputs, each printing the actions the replica takes (a refusal first, as `rejected: …`;
//!   `(no actions)` when nothing happens): `request client=C seq=S [view=V] [bytes=B]`;
//!   `propose from=F cid=C [epoch=E] batch=NAME [unauthentic]`; `write from=F cid=C
//!   [epoch=E] hash=NAME`; `accept from=F cid=C [epoch=E] hash=NAME [forged]` (signed by F
//!   unless forged); `stop from=F regency=R [requests=C.S,…]`; `position from=F next=C
//!   reply=true|false`; `tick`; `log-durable cid=C`; `votes-durable seq=S`.
//! - `show`: the replica's position, timer, counters and the fault it blamed on a leader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tagma_core::{Input, Mode, PeerInput, Recovered, Replica, Start};
use tagma_wire::{
    Accept, Batch, ConsensusId, Digest, Encode, Epoch, Regency, RequestEnvelope, Stop, ViewId, Vote,
};

use crate::harness::{acc, acc_by, durable_params, key, params, prepared, r, req_sized};

mod render;

/// The environment variable that makes the runner write the actual output into the files.
const REWRITE_VAR: &str = "TAGMA_REWRITE";

#[test]
fn scenarios() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/scenarios exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario in {}", dir.display());
    let rewrite = std::env::var(REWRITE_VAR).is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).expect("a readable scenario");
        match run(&name, &text) {
            Ok(run) if rewrite => {
                if run.rewritten != text {
                    std::fs::write(path, &run.rewritten).expect("the scenario is writable");
                }
            }
            Ok(run) => failures.extend(run.mismatches),
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} (run with {REWRITE_VAR}=1 to accept the actual output)\n\n{}",
        if failures.len() == 1 {
            "1 scenario step differs".to_string()
        } else {
            format!("{} scenario steps differ", failures.len())
        },
        failures.join("\n\n")
    );
}

#[test]
fn an_unknown_command_is_an_error_naming_the_file_and_line() {
    let text =
        "# comment\n\nreplica mode=bft n=4 me=1\n----\n(no actions)\n\nfrobnicate x=1\n----\n";
    assert_eq!(
        run("t.txt", text).err().as_deref(),
        Some("t.txt:7: unknown command `frobnicate`")
    );
}

#[test]
fn malformed_scenarios_are_errors_naming_the_file_and_line() {
    let cases = [
        (
            "replica mode=bft n=4 me=1\n",
            "t.txt:1: expected `----` after the command",
        ),
        ("----\n", "t.txt:1: `----` without a command"),
        (
            "replica mode=bft n=4 me=1 colour=red\n----\n",
            "t.txt:1: unknown argument `colour`",
        ),
        (
            "replica mode=bft me=1\n----\n",
            "t.txt:1: missing argument `n`",
        ),
        (
            "replica mode=bft n=four me=1\n----\n",
            "t.txt:1: `n=four`: not a number",
        ),
        ("tick\n----\n", "t.txt:1: no replica yet"),
        (
            "replica mode=bft n=4 me=1\n----\n\nwrite from=0 cid=0 hash=nope\n----\n",
            "t.txt:4: unknown batch `nope`",
        ),
    ];
    for (text, error) in cases {
        assert_eq!(run("t.txt", text).err().as_deref(), Some(error), "{text}");
    }
}

/// A whole file run: the differences from the expected output, and the file with the actual
/// output in its place.
struct Run {
    mismatches: Vec<String>,
    rewritten: String,
}

/// Parses and runs `text` (the scenario file `name`).
fn run(name: &str, text: &str) -> Result<Run, String> {
    let mut scenario = Scenario::default();
    let mut mismatches = Vec::new();
    let mut rewritten = String::new();
    for item in parse(name, text)? {
        match item {
            Item::Text(line) => {
                rewritten.push_str(&line);
                rewritten.push('\n');
            }
            Item::Step(step) => {
                let at = |e: String| format!("{name}:{}: {e}", step.line);
                let actual = scenario.step(&step.command).map_err(at)?;
                if actual != step.expected {
                    mismatches.push(format!(
                        "{name}:{}: {}\n--- expected\n{}\n--- actual\n{}",
                        step.line,
                        step.command,
                        step.expected.join("\n"),
                        actual.join("\n")
                    ));
                }
                rewritten.push_str(&step.command);
                rewritten.push_str("\n----\n");
                for line in &actual {
                    rewritten.push_str(line);
                    rewritten.push('\n');
                }
                rewritten.push('\n');
            }
        }
    }
    let rewritten = format!("{}\n", rewritten.trim_end_matches('\n'));
    Ok(Run {
        mismatches,
        rewritten,
    })
}

/// A command with its expected output.
struct Step {
    line: usize,
    command: String,
    expected: Vec<String>,
}

enum Item {
    /// A comment or blank line, kept as it is.
    Text(String),
    Step(Step),
}

fn parse(name: &str, text: &str) -> Result<Vec<Item>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim().is_empty() || line.starts_with('#') {
            items.push(Item::Text(line.to_string()));
            i += 1;
            continue;
        }
        let number = i + 1;
        if line == "----" {
            return Err(format!("{name}:{number}: `----` without a command"));
        }
        if lines.get(i + 1) != Some(&"----") {
            return Err(format!(
                "{name}:{number}: expected `----` after the command"
            ));
        }
        i += 2;
        let mut expected = Vec::new();
        while let Some(out) = lines.get(i).filter(|l| !l.trim().is_empty()) {
            expected.push(out.to_string());
            i += 1;
        }
        // The blank line that ends the output.
        i += 1;
        items.push(Item::Step(Step {
            line: number,
            command: line.to_string(),
            expected,
        }));
    }
    Ok(items)
}

/// A command's arguments: `key=value` pairs and bare flags, each to be used exactly once.
struct Args<'a> {
    args: Vec<(&'a str, Option<&'a str>)>,
    used: Vec<bool>,
}

impl<'a> Args<'a> {
    fn new(words: impl Iterator<Item = &'a str>) -> Self {
        let args: Vec<_> = words
            .map(|w| match w.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (w, None),
            })
            .collect();
        let used = vec![false; args.len()];
        Args { args, used }
    }

    fn take(&mut self, key: &str) -> Option<Option<&'a str>> {
        let i = self.args.iter().position(|(k, _)| *k == key)?;
        self.used[i] = true;
        Some(self.args[i].1)
    }

    fn opt(&mut self, key: &str) -> Result<Option<&'a str>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(Some(v)) => Ok(Some(v)),
            Some(None) => Err(format!("`{key}` needs a value")),
        }
    }

    fn get(&mut self, key: &str) -> Result<&'a str, String> {
        self.opt(key)?
            .ok_or_else(|| format!("missing argument `{key}`"))
    }

    fn flag(&mut self, key: &str) -> Result<bool, String> {
        match self.take(key) {
            None => Ok(false),
            Some(None) => Ok(true),
            Some(Some(_)) => Err(format!("`{key}` is a flag, without a value")),
        }
    }

    fn num_opt(&mut self, key: &str) -> Result<Option<u64>, String> {
        self.opt(key)?
            .map(|v| v.parse().map_err(|_| format!("`{key}={v}`: not a number")))
            .transpose()
    }

    fn num(&mut self, key: &str) -> Result<u64, String> {
        self.num_opt(key)?
            .ok_or_else(|| format!("missing argument `{key}`"))
    }

    fn bool(&mut self, key: &str) -> Result<bool, String> {
        match self.get(key)? {
            "true" => Ok(true),
            "false" => Ok(false),
            v => Err(format!("`{key}={v}`: true or false")),
        }
    }

    /// Every argument was used.
    fn finish(self) -> Result<(), String> {
        match self.used.iter().position(|u| !u) {
            Some(i) => Err(format!("unknown argument `{}`", self.args[i].0)),
            None => Ok(()),
        }
    }
}

/// `C.S,C.S,…`: client C's request S.
fn parse_requests(list: &str, view: ViewId, bytes: usize) -> Result<Vec<RequestEnvelope>, String> {
    if list.is_empty() {
        return Ok(vec![]);
    }
    list.split(',')
        .map(|id| {
            let (c, s) = id
                .split_once('.')
                .ok_or_else(|| format!("`{id}`: a request is CLIENT.SEQ"))?;
            let number = |x: &str| {
                x.parse::<u64>()
                    .map_err(|_| format!("`{id}`: a request is CLIENT.SEQ"))
            };
            let mut request = req_sized(number(c)?, number(s)?, bytes);
            request.request.view = view;
            Ok(request)
        })
        .collect()
}

/// What a scenario file has built so far.
#[derive(Default)]
struct Scenario {
    replica: Option<Replica>,
    now_ms: u64,
    /// Named batches, encoded.
    batches: BTreeMap<String, Bytes>,
    /// The name of each named batch's hash.
    names: BTreeMap<Digest, String>,
    /// Batches named by the runner so far (`P1`, `P2`, …).
    proposals_named: usize,
}

impl Scenario {
    /// Runs one command; its output lines.
    fn step(&mut self, command: &str) -> Result<Vec<String>, String> {
        let mut words = command.split_whitespace();
        let name = words.next().expect("a command line is not blank");
        let mut args = Args::new(words);
        let at = args.num_opt("at")?;
        if name == "replica" {
            self.now_ms = at.unwrap_or(0);
        } else if let Some(at) = at {
            self.now_ms = at;
        }
        let input = match name {
            "replica" => return self.new_replica(args),
            "batch" => return self.define_batch(command, args),
            "show" => {
                args.finish()?;
                return self.show();
            }
            "request" => {
                let view = ViewId(args.num_opt("view")?.unwrap_or(0) as u32);
                let bytes = args.num_opt("bytes")?.unwrap_or(8) as usize;
                let id = format!("{}.{}", args.num("client")?, args.num("seq")?);
                let mut requests = parse_requests(&id, view, bytes)?;
                Input::ClientRequest(requests.remove(0))
            }
            "propose" => {
                let (from, cid, epoch) = self.peer_vote_args(&mut args)?;
                let bytes = self.batch(args.get("batch")?)?;
                let mut batch = prepared(&bytes);
                batch.authentic = !args.flag("unauthentic")?;
                peer(from, PeerInput::Propose { cid, epoch, batch })
            }
            "write" => {
                let (from, cid, epoch) = self.peer_vote_args(&mut args)?;
                let hash = tagma_crypto::digest(&self.batch(args.get("hash")?)?);
                peer(from, PeerInput::Write(Vote { cid, epoch, hash }))
            }
            "accept" => {
                let (from, cid, epoch) = self.peer_vote_args(&mut args)?;
                let hash = tagma_crypto::digest(&self.batch(args.get("hash")?)?);
                let vote = Vote { cid, epoch, hash };
                let accept: Accept = if args.flag("forged")? {
                    acc(vote)
                } else {
                    acc_by(from, vote)
                };
                peer(from, PeerInput::Accept(accept))
            }
            "stop" => {
                let from = args.num("from")? as u32;
                let regency = Regency(args.num("regency")? as u32);
                let requests = parse_requests(args.opt("requests")?.unwrap_or(""), ViewId(0), 8)?;
                peer(from, PeerInput::Stop(Stop { regency, requests }))
            }
            "position" => {
                let from = args.num("from")? as u32;
                let next = ConsensusId(args.num("next")?);
                let reply = args.bool("reply")?;
                peer(from, PeerInput::Position { next, reply })
            }
            "tick" => Input::Tick,
            "log-durable" => Input::LogDurable(ConsensusId(args.num("cid")?)),
            "votes-durable" => Input::VotesDurable {
                seq: args.num("seq")?,
            },
            other => return Err(format!("unknown command `{other}`")),
        };
        args.finish()?;
        let now_ms = self.now_ms;
        let replica = self.replica.as_mut().ok_or("no replica yet")?;
        let result = replica.handle(now_ms, input);
        let mut out: Vec<String> = result
            .err()
            .map(|e| format!("rejected: {e:?}"))
            .into_iter()
            .collect();
        out.extend(self.actions());
        Ok(out)
    }

    fn new_replica(&mut self, mut args: Args) -> Result<Vec<String>, String> {
        let mode = match args.get("mode")? {
            "bft" => Mode::Bft,
            "cft" => Mode::Cft,
            m => return Err(format!("`mode={m}`: bft or cft")),
        };
        let n = args.num("n")? as u32;
        let me = args.num("me")? as u32;
        if n == 0 || me >= n {
            return Err(format!("replica {me} is not one of the {n} members"));
        }
        let durable = args.flag("durable")?;
        let state_vote = match args.opt("state-vote")? {
            None | Some("on") => true,
            Some("off") => false,
            Some(v) => return Err(format!("`state-vote={v}`: on or off")),
        };
        let mut p = if durable {
            durable_params(mode, n, me, state_vote)
        } else {
            params(mode, n, me)
        };
        if let Some(view) = args.num_opt("view")? {
            p.view = ViewId(view as u32);
        }
        let start = match args.opt("start")?.unwrap_or("fresh") {
            "fresh" => Start::Fresh,
            "recovered" if durable => Start::Recovered(Recovered::default()),
            "recovered" => return Err("`start=recovered` needs `durable`".into()),
            s => return Err(format!("`start={s}`: fresh or recovered")),
        };
        args.finish()?;
        self.replica = Some(Replica::new(p, key(me), start, self.now_ms));
        Ok(self.actions())
    }

    fn define_batch(&mut self, command: &str, mut args: Args) -> Result<Vec<String>, String> {
        let name = command.split_whitespace().nth(1).unwrap_or_default();
        // The batch's name is the first (bare) argument.
        if name.is_empty() || name.contains('=') || !args.flag(name)? {
            return Err("`batch` needs a name first".into());
        }
        let timestamp_ms = args.num("ts")?;
        let bytes = args.num_opt("bytes")?.unwrap_or(8) as usize;
        let requests = parse_requests(args.get("requests")?, ViewId(0), bytes)?;
        args.finish()?;
        let encoded = Batch {
            timestamp_ms,
            seed: 0,
            requests,
        }
        .to_bytes();
        self.name_batch(name.to_string(), encoded)?;
        Ok(vec!["ok".into()])
    }

    fn name_batch(&mut self, name: String, bytes: Bytes) -> Result<(), String> {
        let hash = tagma_crypto::digest(&bytes);
        if self.batches.contains_key(&name) {
            return Err(format!("batch `{name}` is defined already"));
        }
        if let Some(other) = self.names.get(&hash) {
            return Err(format!("batch `{name}` is the same as `{other}`"));
        }
        self.names.insert(hash, name.clone());
        self.batches.insert(name, bytes);
        Ok(())
    }

    fn batch(&self, name: &str) -> Result<Bytes, String> {
        self.batches
            .get(name)
            .cloned()
            .ok_or_else(|| format!("unknown batch `{name}`"))
    }

    fn peer_vote_args(&self, args: &mut Args) -> Result<(u32, ConsensusId, Epoch), String> {
        Ok((
            args.num("from")? as u32,
            ConsensusId(args.num("cid")?),
            Epoch(args.num_opt("epoch")?.unwrap_or(0) as u32),
        ))
    }

    fn show(&mut self) -> Result<Vec<String>, String> {
        let replica = self.replica.as_ref().ok_or("no replica yet")?;
        let s = replica.stats();
        let timeout = replica
            .next_timeout_ms()
            .map_or("none".to_string(), |t| t.to_string());
        let fault = replica
            .suspected_leader_fault()
            .map_or("none".to_string(), |(cid, f)| {
                format!("cid={} {f:?}", cid.0)
            });
        Ok(vec![
            format!(
                "next_cid={} regency={} leader={} starting_up={} next_timeout_ms={timeout}",
                replica.next_cid().0,
                replica.regency().0,
                replica.leader().0,
                replica.is_starting_up(),
            ),
            format!(
                "decided_instances={} decided_requests={} proposals_sent={} pending_requests={} future_messages_buffered={} leader_changes={}",
                s.decided_instances,
                s.decided_requests,
                s.proposals_sent,
                s.pending_requests,
                s.future_messages_buffered,
                s.leader_changes
            ),
            format!("suspected_leader_fault={fault}"),
        ])
    }
}

fn peer(from: u32, input: PeerInput) -> Input {
    Input::Peer {
        from: r(from),
        input,
    }
}
