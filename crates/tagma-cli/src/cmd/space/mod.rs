//! `tagma space`: one operation on the coordination service (tuple spaces), its result
//! printed as text or, with `--json`, as one JSON object; `watch` prints every tuple a
//! template matches as it is inserted, until interrupted. With `--space-key`, operations on a
//! protected space go through [`tagma_space::ConfidentialSpace`] ([`protected`]); `keygen`
//! writes a space key.
//!
//! Modules: [`args`] (the arguments), [`text`] (parsing and showing), [`protected`]
//! (operations with a space key).

pub mod args;
mod protected;
mod text;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;
use tagma_client::{ClientOptions, Proxy};
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir;
use tagma_space::{
    CasOutcome, Pattern, Policy, Protection, SealingGroup, SpaceClient, SpaceKey, TypedTemplate,
};

pub use args::{SpaceArgs, SpaceCmd};
use text::{
    Shown, WATCH_WAIT, done, many, not_inserted, nothing_replaced, one, parse_policy,
    parse_protection, parse_template, parse_tuple, spaces, stored_json, stored_line, watch_each,
};

/// `tagma space`.
pub fn run(args: SpaceArgs) -> Result<()> {
    if let SpaceCmd::Keygen { file } = &args.op {
        return keygen(file);
    }
    let dir = args
        .dir
        .as_ref()
        .context("tagma space needs the cluster directory: give --dir DIR")?;
    let cfg = cluster_dir::load_config(dir)?;
    let key_path = args
        .key
        .clone()
        .unwrap_or_else(|| cluster_dir::client_key_path(dir));
    let key = IdentityKey::read_file(&key_path)?;
    let space_key = args.space_key.as_deref().map(read_space_key).transpose()?;
    let proxy = Proxy::connect(&cfg, key, ClientOptions::new(args.principal))?;
    let client = SpaceClient::new(proxy);
    let shown = match space_key {
        Some(space_key) if args.op.tuple_space().is_some() => {
            let group = SealingGroup::from_view(&cfg.initial_view())?;
            protected::run_op(&client, args.op, &space_key, group, args.json)?
        }
        _ => run_plain(&client, args.op, args.json)?,
    };
    let Some(shown) = shown else {
        return Ok(());
    };
    for warning in &shown.warnings {
        eprintln!("warning: {warning}");
    }
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

/// Refuses, before anything is sent, an operation without a space key that would carry a
/// value at a comparable or private position of a protected space: the replicas would get
/// it in the clear (and keep it in their logs), though they refuse the operation.
fn refuse_clear_values(client: &SpaceClient, op: &SpaceCmd) -> Result<()> {
    let (space, tuple, template) = match op {
        SpaceCmd::Out { space, tuple, .. } => (space, Some(tuple), None),
        SpaceCmd::Cas {
            space,
            template,
            tuple,
            ..
        }
        | SpaceCmd::Replace {
            space,
            template,
            tuple,
            ..
        } => (space, Some(tuple), Some(template)),
        SpaceCmd::Rdp {
            space, template, ..
        }
        | SpaceCmd::Inp { space, template }
        | SpaceCmd::Rd {
            space, template, ..
        }
        | SpaceCmd::In {
            space, template, ..
        }
        | SpaceCmd::Rdall {
            space, template, ..
        }
        | SpaceCmd::Inall {
            space, template, ..
        }
        | SpaceCmd::Renew {
            space, template, ..
        }
        | SpaceCmd::Watch {
            space, template, ..
        } => (space, None, Some(template)),
        _ => return Ok(()),
    };
    // Positions holding a value: every field of a tuple, the values of a template.
    let mut valued: Vec<usize> = Vec::new();
    if let Some(tuple) = tuple {
        valued.extend(0..parse_tuple(tuple)?.0.len());
    }
    if let Some(template) = template {
        let template = parse_template(template)?;
        valued.extend(
            template
                .0
                .iter()
                .enumerate()
                .filter(|(_, p)| matches!(p, Pattern::Is(_)))
                .map(|(i, _)| i),
        );
    }
    if valued.is_empty() {
        return Ok(());
    }
    let Some(protection) = client
        .list()
        .wait()?
        .into_iter()
        .find(|info| info.name == *space)
        .and_then(|info| info.protection)
    else {
        return Ok(());
    };
    if let Some(index) = valued.into_iter().find(|i| {
        protection
            .0
            .get(*i)
            .is_some_and(|p| *p != Protection::Public)
    }) {
        anyhow::bail!(
            "space `{space}` is protected ({protection}) and field {index} is not public: \
             give --space-key FILE, which hashes and seals such fields (sent without it, the \
             value would reach the replicas in the clear); nothing was sent"
        );
    }
    Ok(())
}

/// An operation without a space key; `None` when it printed its results itself (watch).
fn run_plain(client: &SpaceClient, op: SpaceCmd, json: bool) -> Result<Option<Shown>> {
    refuse_clear_values(client, &op)?;
    let lease = |ms: Option<u64>| ms.map(Duration::from_millis);
    Ok(Some(match op {
        SpaceCmd::Keygen { file } => {
            keygen(&file)?;
            return Ok(None);
        }
        SpaceCmd::Create {
            space,
            policy,
            policy_file,
            protection,
        } => {
            let policy = match (policy, policy_file) {
                (Some(text), _) => parse_policy(&text)?,
                (None, Some(path)) => parse_policy(
                    &std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?,
                )?,
                (None, None) => Policy::default(),
            };
            let protection = protection.as_deref().map(parse_protection).transpose()?;
            client
                .create_protected(&space, policy, protection.clone())
                .wait()?;
            done(
                format!("created {space}"),
                json!({
                    "created": space,
                    "protection": protection.as_ref().map(ToString::to_string),
                }),
            )
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
                CasOutcome::Exists(s) => not_inserted(&s),
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
                None => nothing_replaced(),
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
            watch(client, &space, &parse_template(&template)?, count, json)?;
            return Ok(None);
        }
    }))
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
    watch_each(count, json, |after| {
        Ok(client
            .rd_after(space, template.clone(), after, WATCH_WAIT)
            .wait()?)
    })
}

/// `tagma space keygen FILE`: 32 random bytes, owner-only, never over an existing file.
fn keygen(file: &Path) -> Result<()> {
    let key = SpaceKey::generate();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(file).with_context(|| {
        format!(
            "cannot create the space key file {} — fix: name a file that does not exist yet, \
             in a writable directory",
            file.display()
        )
    })?;
    out.write_all(key.as_bytes())
        .and_then(|()| out.sync_all())
        .with_context(|| format!("cannot write {}", file.display()))?;
    println!("wrote a space key to {}", file.display());
    Ok(())
}

/// The space key in `path`: exactly 32 bytes.
fn read_space_key(path: &Path) -> Result<SpaceKey> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "cannot read the space key {} — fix: make one with `tagma space keygen {}`",
            path.display(),
            path.display()
        )
    })?;
    SpaceKey::from_slice(&bytes).with_context(|| format!("space key {}", path.display()))
}
