//! `tagma space`: one operation on the coordination service (tuple spaces), its result
//! printed as text or, with `--json`, as one JSON object; `watch` prints every tuple a
//! template matches as it is inserted, until interrupted.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tagma_client::{ClientOptions, Proxy};
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};
use tagma_space::{CasOutcome, Policy, SpaceClient, SpaceInfo, Stored, TypedTemplate, TypedTuple};

const SYNTAX: &str = "Tuples and templates are written as in `(\"job\", 42, 0x00ff)`: integers, \
\"strings\" (escapes \\\" \\\\ \\n \\r \\t \\u{hex}) and bytes as 0x and hex digits; a template \
may use * (any field), *int, *str and *bytes. Quote them for the shell: \
tagma space --dir c1 out jobs '(\"build\", 42)'. Policies are lines such as `read: any`, \
`insert: 1, 2`, `take: creator`, `admin: 1`, `take requires field 0 = invoker`, \
`unique (\"lock\", *)`.";

/// `tagma space`.
#[derive(clap::Args)]
#[command(after_help = SYNTAX)]
pub struct SpaceArgs {
    /// The cluster directory (written by `tagma init`); its replicas must run
    /// `--service space`.
    #[arg(long)]
    pub dir: PathBuf,
    /// Client secret key [default: DIR/keys/client.key].
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Client principal id of that key.
    #[arg(long, default_value_t = DEFAULT_CLIENT_PRINCIPAL)]
    pub principal: u32,
    /// Print the result as one JSON object (tuples in their text form).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub op: SpaceCmd,
}

#[derive(clap::Subcommand)]
pub enum SpaceCmd {
    /// Create a space, with an access policy (the default: everyone reads, inserts and
    /// takes; the creator administers).
    Create {
        /// The space's name (1 to 64 of A-Z a-z 0-9 _ . -).
        space: String,
        /// The policy's text (lines separated by newlines or `;`).
        #[arg(long, conflicts_with = "policy_file")]
        policy: Option<String>,
        /// Read the policy from FILE.
        #[arg(long, value_name = "FILE")]
        policy_file: Option<PathBuf>,
    },
    /// Destroy a space; its waiting operations are told it is gone.
    Destroy {
        /// The space.
        space: String,
    },
    /// List the spaces with their tuple and waiting-operation counts.
    List,
    /// Insert a tuple; prints its revision.
    Out {
        space: String,
        /// The tuple, e.g. '("job", 7)'.
        tuple: String,
        /// The tuple vanishes this long after insertion unless renewed.
        #[arg(long)]
        lease_ms: Option<u64>,
    },
    /// Read the oldest tuple matching TEMPLATE (status 1 if none).
    Rdp {
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// Read without ordering (faster; falls back to ordered if the replicas disagree).
        #[arg(long)]
        unordered: bool,
    },
    /// Take the oldest tuple matching TEMPLATE (status 1 if none).
    Inp { space: String, template: String },
    /// Read the oldest tuple matching TEMPLATE, waiting for one (status 1 on timeout).
    Rd {
        space: String,
        template: String,
        /// How long to wait.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Take the oldest tuple matching TEMPLATE, waiting for one (status 1 on timeout).
    In {
        space: String,
        template: String,
        /// How long to wait.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Insert TUPLE if nothing matches TEMPLATE; otherwise print the match (status 1).
    Cas {
        space: String,
        template: String,
        tuple: String,
        #[arg(long)]
        lease_ms: Option<u64>,
    },
    /// Take the oldest match of TEMPLATE and insert TUPLE in its place (status 1 if none).
    Replace {
        space: String,
        template: String,
        tuple: String,
        #[arg(long)]
        lease_ms: Option<u64>,
    },
    /// Read up to --max tuples matching TEMPLATE, oldest first.
    Rdall {
        space: String,
        template: String,
        #[arg(long, default_value_t = 100)]
        max: u32,
        /// Read without ordering.
        #[arg(long)]
        unordered: bool,
    },
    /// Take up to --max tuples matching TEMPLATE, oldest first.
    Inall {
        space: String,
        template: String,
        #[arg(long, default_value_t = 100)]
        max: u32,
    },
    /// Extend the leases of this client's tuples matching TEMPLATE.
    Renew {
        space: String,
        template: String,
        #[arg(long)]
        lease_ms: u64,
    },
    /// Print the tuples matching TEMPLATE, then every one inserted later, as it is
    /// inserted (until interrupted, or --count tuples).
    Watch {
        space: String,
        template: String,
        /// Stop after this many tuples.
        #[arg(long)]
        count: Option<u64>,
    },
}

fn stored_json(s: &Stored) -> Value {
    json!({
        "tuple": s.tuple.to_string(),
        "revision": s.revision,
        "lease_expires_ms": s.lease_expires_ms,
    })
}

fn stored_line(s: &Stored) -> String {
    match s.lease_expires_ms {
        Some(end) => format!("{}  revision {}  lease ends {end}", s.tuple, s.revision),
        None => format!("{}  revision {}", s.tuple, s.revision),
    }
}

fn parse_tuple(text: &str) -> Result<TypedTuple> {
    text.parse()
        .with_context(|| format!("`{text}` is not a tuple — {SYNTAX}"))
}

fn parse_template(text: &str) -> Result<TypedTemplate> {
    text.parse()
        .with_context(|| format!("`{text}` is not a template — {SYNTAX}"))
}

fn parse_policy(text: &str) -> Result<Policy> {
    text.replace(';', "\n")
        .parse()
        .map_err(|e| anyhow::anyhow!("the policy does not parse: {e}"))
}

/// What an operation printed, and whether it found what it looked for (exit status).
struct Shown {
    text: Vec<String>,
    json: Value,
    found: bool,
}

fn one(found: Option<Stored>, none: &str) -> Shown {
    match found {
        Some(s) => Shown {
            text: vec![stored_line(&s)],
            json: json!({ "found": true, "tuple": stored_json(&s) }),
            found: true,
        },
        None => Shown {
            text: vec![none.to_owned()],
            json: json!({ "found": false }),
            found: false,
        },
    }
}

fn many(tuples: Vec<Stored>) -> Shown {
    Shown {
        text: tuples.iter().map(stored_line).collect(),
        json: json!({ "tuples": tuples.iter().map(stored_json).collect::<Vec<_>>() }),
        found: true,
    }
}

fn spaces(list: Vec<SpaceInfo>) -> Shown {
    Shown {
        text: list
            .iter()
            .map(|s| format!("{}  {} tuples  {} waiting", s.name, s.tuples, s.waiting))
            .collect(),
        json: json!({ "spaces": list.iter().map(|s| json!({
            "name": s.name, "tuples": s.tuples, "waiting": s.waiting,
        })).collect::<Vec<_>>() }),
        found: true,
    }
}

fn done(text: String, json: Value) -> Shown {
    Shown {
        text: vec![text],
        json,
        found: true,
    }
}

/// `tagma space`.
pub fn run(args: SpaceArgs) -> Result<()> {
    let dir = &args.dir;
    let cfg = cluster_dir::load_config(dir)?;
    let key_path = args
        .key
        .clone()
        .unwrap_or_else(|| cluster_dir::client_key_path(dir));
    let key = IdentityKey::read_file(&key_path)?;
    let proxy = Proxy::connect(&cfg, key, ClientOptions::new(args.principal))?;
    let client = SpaceClient::new(proxy);
    let lease = |ms: Option<u64>| ms.map(Duration::from_millis);
    let shown = match args.op {
        SpaceCmd::Create {
            space,
            policy,
            policy_file,
        } => {
            let policy = match (policy, policy_file) {
                (Some(text), _) => parse_policy(&text)?,
                (None, Some(path)) => parse_policy(
                    &std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?,
                )?,
                (None, None) => Policy::default(),
            };
            client.create(&space, policy).wait()?;
            done(format!("created {space}"), json!({ "created": space }))
        }
        SpaceCmd::Destroy { space } => {
            client.destroy(&space).wait()?;
            done(format!("destroyed {space}"), json!({ "destroyed": space }))
        }
        SpaceCmd::List => spaces(client.list().wait()?),
        SpaceCmd::Out {
            space,
            tuple,
            lease_ms,
        } => {
            let receipt = client
                .out(&space, parse_tuple(&tuple)?, lease(lease_ms))
                .wait()?;
            done(
                format!("inserted, revision {}", receipt.revision),
                json!({ "revision": receipt.revision, "lease_expires_ms": receipt.lease_expires_ms }),
            )
        }
        SpaceCmd::Rdp {
            space,
            template,
            unordered,
        } => {
            let template = parse_template(&template)?;
            let found = if unordered {
                client.rdp_unordered(&space, template).wait()?
            } else {
                client.rdp(&space, template).wait()?
            };
            one(found, "no match")
        }
        SpaceCmd::Inp { space, template } => one(
            client.inp(&space, parse_template(&template)?).wait()?,
            "no match",
        ),
        SpaceCmd::Rd {
            space,
            template,
            timeout_ms,
        } => one(
            client
                .rd(
                    &space,
                    parse_template(&template)?,
                    Duration::from_millis(timeout_ms),
                )
                .wait()?,
            "timed out: no match",
        ),
        SpaceCmd::In {
            space,
            template,
            timeout_ms,
        } => one(
            client
                .in_(
                    &space,
                    parse_template(&template)?,
                    Duration::from_millis(timeout_ms),
                )
                .wait()?,
            "timed out: no match",
        ),
        SpaceCmd::Cas {
            space,
            template,
            tuple,
            lease_ms,
        } => {
            let outcome = client
                .cas(
                    &space,
                    parse_template(&template)?,
                    parse_tuple(&tuple)?,
                    lease(lease_ms),
                )
                .wait()?;
            match outcome {
                CasOutcome::Inserted(r) => done(
                    format!("inserted, revision {}", r.revision),
                    json!({ "inserted": true, "revision": r.revision, "lease_expires_ms": r.lease_expires_ms }),
                ),
                CasOutcome::Exists(s) => Shown {
                    text: vec![format!("not inserted: {}", stored_line(&s))],
                    json: json!({ "inserted": false, "existing": stored_json(&s) }),
                    found: false,
                },
            }
        }
        SpaceCmd::Replace {
            space,
            template,
            tuple,
            lease_ms,
        } => {
            let replaced = client
                .replace(
                    &space,
                    parse_template(&template)?,
                    parse_tuple(&tuple)?,
                    lease(lease_ms),
                )
                .wait()?;
            match replaced {
                Some(r) => done(
                    format!(
                        "replaced {}; inserted, revision {}",
                        stored_line(&r.taken),
                        r.inserted.revision
                    ),
                    json!({ "replaced": true, "taken": stored_json(&r.taken), "revision": r.inserted.revision }),
                ),
                None => Shown {
                    text: vec!["no match: nothing replaced".into()],
                    json: json!({ "replaced": false }),
                    found: false,
                },
            }
        }
        SpaceCmd::Rdall {
            space,
            template,
            max,
            unordered,
        } => {
            let template = parse_template(&template)?;
            many(if unordered {
                client.rd_all_unordered(&space, template, max).wait()?
            } else {
                client.rd_all(&space, template, max).wait()?
            })
        }
        SpaceCmd::Inall {
            space,
            template,
            max,
        } => many(
            client
                .in_all(&space, parse_template(&template)?, max)
                .wait()?,
        ),
        SpaceCmd::Renew {
            space,
            template,
            lease_ms,
        } => {
            let n = client
                .renew(
                    &space,
                    parse_template(&template)?,
                    Duration::from_millis(lease_ms),
                )
                .wait()?;
            done(format!("renewed {n}"), json!({ "renewed": n }))
        }
        SpaceCmd::Watch {
            space,
            template,
            count,
        } => {
            return watch(
                &client,
                &space,
                &parse_template(&template)?,
                count,
                args.json,
            );
        }
    };
    if args.json {
        println!("{}", shown.json);
    } else {
        for line in &shown.text {
            println!("{line}");
        }
    }
    if !shown.found {
        std::process::exit(1);
    }
    Ok(())
}

/// `tagma space watch`: every tuple matching `template`, oldest first, then each one
/// inserted later as it comes (one line, or one JSON object, per tuple).
fn watch(
    client: &SpaceClient,
    space: &str,
    template: &TypedTemplate,
    count: Option<u64>,
    json: bool,
) -> Result<()> {
    const WAIT: Duration = Duration::from_secs(60);
    let mut after = 0;
    let mut printed = 0;
    loop {
        if count.is_some_and(|c| printed >= c) {
            return Ok(());
        }
        let Some(stored) = client
            .rd_after(space, template.clone(), after, WAIT)
            .wait()?
        else {
            continue;
        };
        after = stored.revision;
        printed += 1;
        if json {
            println!("{}", stored_json(&stored));
        } else {
            println!("{}", stored_line(&stored));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_tuples_templates_and_policies_name_the_syntax() {
        let e = parse_tuple("(\"a\", *)").unwrap_err();
        assert!(format!("{e:#}").contains("not a tuple"), "{e:#}");
        assert!(format!("{e:#}").contains("*int"), "{e:#}");
        let e = parse_template("(1,").unwrap_err();
        assert!(format!("{e:#}").contains("not a template"), "{e:#}");
        let p = parse_policy("read: any; insert: 1, 2; take: creator").unwrap();
        assert!(p.allows(tagma_space::OpClass::Insert, 2, 9));
        assert!(!p.allows(tagma_space::OpClass::Insert, 3, 9));
        assert!(p.allows(tagma_space::OpClass::Take, 9, 9));
        assert!(parse_policy("read anyone").is_err());
    }
}
