//! `tagma space --space-key FILE` on a protected space: the operation goes through
//! [`ConfidentialSpace`] — tuples hashed and sealed on insertion, templates hashed, every
//! tuple returned opened with f+1 replicas' shares and shown as its writer inserted it. A
//! replica caught giving a wrong share is named on standard error (and in the JSON's
//! `wrong_shares`).

use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use tagma_space::{
    ConfidentialSpace, Revealed, SealingGroup, SpaceClient, SpaceKey, Stored,
    confidential::ConfidentialCas,
};

use super::args::SpaceCmd;
use super::text::{
    Shown, WATCH_WAIT, done, many, not_inserted, nothing_replaced, one, parse_template,
    parse_tuple, stored_json, stored_line, watch_each,
};

/// `revealed` as the tuple its writer inserted.
fn plain(revealed: &Revealed) -> Stored {
    Stored {
        tuple: revealed.tuple.clone(),
        revision: revealed.revision,
        lease_expires_ms: revealed.lease_expires_ms,
        sealed: None,
    }
}

/// Adds the wrong shares the reads caught to `shown`.
fn with_wrong_shares<'r>(mut shown: Shown, read: impl IntoIterator<Item = &'r Revealed>) -> Shown {
    let mut caught = Vec::new();
    for revealed in read {
        for replica in &revealed.wrong_shares {
            shown.warnings.push(format!(
                "replica {replica} gave a wrong share of revision {} (a faulty replica); the \
                 others' shares opened it",
                revealed.revision
            ));
            caught.push(json!({ "revision": revealed.revision, "replica": replica.0 }));
        }
    }
    if let Some(object) = shown.json.as_object_mut() {
        object.insert("wrong_shares".into(), json!(caught));
    }
    shown
}

fn one_revealed(found: Option<Revealed>, none: &str) -> Shown {
    let shown = one(found.as_ref().map(plain), none);
    with_wrong_shares(shown, found.as_ref())
}

fn many_revealed(found: Vec<Revealed>) -> Shown {
    let shown = many(found.iter().map(plain).collect());
    with_wrong_shares(shown, &found)
}

/// Runs `op` (an operation on a space's tuples) on a protected space with `key`, sealing for
/// `group`; `None` when it printed its results itself (watch).
pub(crate) fn run_op(
    client: &SpaceClient,
    op: SpaceCmd,
    key: &SpaceKey,
    group: SealingGroup,
    json_out: bool,
) -> Result<Option<Shown>> {
    let Some(space) = op.tuple_space() else {
        anyhow::bail!("a space key applies to operations on a space's tuples only");
    };
    let space = ConfidentialSpace::open(client, space, key, group)?;
    let lease = |ms: Option<u64>| ms.map(Duration::from_millis);
    Ok(Some(match op {
        SpaceCmd::Out {
            tuple, lease_ms, ..
        } => {
            let receipt = space.out(&parse_tuple(&tuple)?, lease(lease_ms))?;
            done(
                format!("inserted, revision {}", receipt.revision),
                json!({ "revision": receipt.revision, "lease_expires_ms": receipt.lease_expires_ms }),
            )
        }
        SpaceCmd::Rdp {
            template,
            unordered,
            ..
        } => {
            let template = parse_template(&template)?;
            let found = if unordered {
                space.rdp_unordered(&template)?
            } else {
                space.rdp(&template)?
            };
            one_revealed(found, "no match")
        }
        SpaceCmd::Inp { template, .. } => {
            one_revealed(space.inp(&parse_template(&template)?)?, "no match")
        }
        SpaceCmd::Rd {
            template,
            timeout_ms,
            ..
        } => one_revealed(
            space.rd(
                &parse_template(&template)?,
                Duration::from_millis(timeout_ms),
            )?,
            "timed out: no match",
        ),
        SpaceCmd::In {
            template,
            timeout_ms,
            ..
        } => one_revealed(
            space.in_(
                &parse_template(&template)?,
                Duration::from_millis(timeout_ms),
            )?,
            "timed out: no match",
        ),
        SpaceCmd::Cas {
            template,
            tuple,
            lease_ms,
            ..
        } => {
            let outcome = space.cas(
                &parse_template(&template)?,
                &parse_tuple(&tuple)?,
                lease(lease_ms),
            )?;
            match outcome {
                ConfidentialCas::Inserted(r) => done(
                    format!("inserted, revision {}", r.revision),
                    json!({ "inserted": true, "revision": r.revision, "lease_expires_ms": r.lease_expires_ms }),
                ),
                ConfidentialCas::Exists(existing) => {
                    with_wrong_shares(not_inserted(&plain(&existing)), [&existing])
                }
            }
        }
        SpaceCmd::Replace {
            template,
            tuple,
            lease_ms,
            ..
        } => {
            let replaced = space.replace(
                &parse_template(&template)?,
                &parse_tuple(&tuple)?,
                lease(lease_ms),
            )?;
            match replaced {
                Some(r) => {
                    let taken = plain(&r.taken);
                    let shown = done(
                        format!(
                            "replaced {}; inserted, revision {}",
                            stored_line(&taken),
                            r.inserted.revision
                        ),
                        json!({ "replaced": true, "taken": stored_json(&taken), "revision": r.inserted.revision }),
                    );
                    with_wrong_shares(shown, [&r.taken])
                }
                None => nothing_replaced(),
            }
        }
        SpaceCmd::Rdall {
            template,
            max,
            unordered,
            ..
        } => {
            let template = parse_template(&template)?;
            many_revealed(if unordered {
                space.rd_all_unordered(&template, max)?
            } else {
                space.rd_all(&template, max)?
            })
        }
        SpaceCmd::Inall { template, max, .. } => {
            many_revealed(space.in_all(&parse_template(&template)?, max)?)
        }
        SpaceCmd::Renew {
            template, lease_ms, ..
        } => {
            let n = space.renew(&parse_template(&template)?, Duration::from_millis(lease_ms))?;
            done(format!("renewed {n}"), json!({ "renewed": n }))
        }
        SpaceCmd::Watch {
            template, count, ..
        } => {
            watch(&space, &parse_template(&template)?, count, json_out)?;
            return Ok(None);
        }
        SpaceCmd::Create { .. }
        | SpaceCmd::Destroy { .. }
        | SpaceCmd::List
        | SpaceCmd::Keygen { .. } => {
            anyhow::bail!("a space key applies to operations on a space's tuples only")
        }
    }))
}

/// `tagma space --space-key FILE watch`: as the plain watch, every tuple opened.
fn watch(
    space: &ConfidentialSpace<'_>,
    template: &tagma_space::TypedTemplate,
    count: Option<u64>,
    json_out: bool,
) -> Result<()> {
    watch_each(count, json_out, |after| {
        let Some(revealed) = space.rd_after(template, after, WATCH_WAIT)? else {
            return Ok(None);
        };
        for replica in &revealed.wrong_shares {
            eprintln!(
                "warning: replica {replica} gave a wrong share of revision {} (a faulty \
                 replica); the others' shares opened it",
                revealed.revision
            );
        }
        Ok(Some(plain(&revealed)))
    })
}
