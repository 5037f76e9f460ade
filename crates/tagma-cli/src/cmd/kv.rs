//! `tagma kv`: one operation on the replicated key-value service, its result printed.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use tagma_client::{ClientOptions, Proxy};
use tagma_crypto::IdentityKey;
use tagma_kv::{KvOp, KvReply};
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};

/// `tagma kv`.
#[derive(clap::Args)]
#[command(
    after_help = "Values are printed as text. A value of 8 bytes that is not text is \
the 64-bit counter `kv incr` keeps and is printed as a number. `kv get --out FILE` writes \
the value's exact bytes."
)]
pub struct KvArgs {
    /// The cluster directory (written by `tagma init`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Client secret key [default: DIR/keys/client.key].
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Client principal id of that key.
    #[arg(long, default_value_t = DEFAULT_CLIENT_PRINCIPAL)]
    pub principal: u32,
    /// Send reads unordered (faster; falls back to ordered if replicas disagree).
    #[arg(long)]
    pub unordered: bool,
    #[command(subcommand)]
    pub op: KvCmd,
}

#[derive(clap::Subcommand)]
pub enum KvCmd {
    /// Set KEY to VALUE (or to the contents of --value-file); prints the value it replaced.
    Put {
        /// The key.
        key: String,
        /// The new value (or give --value-file).
        #[arg(required_unless_present = "value_file")]
        value: Option<String>,
        /// Read the new value from FILE (`-`: standard input), byte for byte.
        #[arg(long, value_name = "FILE", conflicts_with = "value")]
        value_file: Option<PathBuf>,
    },
    /// Print KEY's value. A missing key prints nothing on standard output, says so on
    /// standard error and exits with status 1 (a value is always printed, even an empty
    /// one, with status 0).
    Get {
        /// The key.
        key: String,
        /// Write the value's exact bytes to FILE (`-`: standard output, without a newline)
        /// instead of printing it as text.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Remove KEY; prints the value it had.
    Delete {
        /// The key.
        key: String,
    },
    /// Set KEY to NEW if its value is EXPECTED: `kv cas KEY EXPECTED NEW`; or, with
    /// --absent, if KEY has no value: `kv cas --absent KEY NEW`.
    Cas {
        /// The key.
        key: String,
        /// The value KEY must have (with --absent: the new value).
        #[arg(value_name = "EXPECTED")]
        expected: String,
        /// The new value (not given with --absent).
        #[arg(required_unless_present = "absent", conflicts_with = "absent")]
        new: Option<String>,
        /// Apply only if KEY has no value.
        #[arg(long)]
        absent: bool,
    },
    /// Add DELTA to the 64-bit counter at KEY (a missing key counts as 0); prints the sum.
    Incr {
        /// The key.
        key: String,
        /// The amount to add (negative to subtract).
        #[arg(allow_hyphen_values = true)]
        delta: i64,
    },
    /// List keys starting with PREFIX, one `key<TAB>value` a line.
    Scan {
        /// The prefix.
        prefix: String,
        /// Most keys listed.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

/// How a value is shown: as text, or as the number a counter holds.
pub fn show_value(v: &[u8]) -> String {
    let text = std::str::from_utf8(v)
        .ok()
        .filter(|t| !t.chars().any(|c| c.is_control() && c != '\n' && c != '\t'));
    match (text, <[u8; 8]>::try_from(v)) {
        (Some(t), _) => t.to_string(),
        (None, Ok(counter)) => i64::from_le_bytes(counter).to_string(),
        (None, Err(_)) => String::from_utf8_lossy(v).into_owned(),
    }
}

/// A previous or current value in a result line.
fn show(v: &Option<Bytes>) -> String {
    v.as_deref()
        .map(show_value)
        .unwrap_or_else(|| "(absent)".into())
}

/// Reads a value file (`-`: standard input) of at most `bytes_max` bytes.
fn read_value(path: &Path, bytes_max: usize) -> Result<Bytes> {
    let mut value = Vec::new();
    let limit = bytes_max as u64 + 1;
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut value)
            .context("cannot read the value from standard input")?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(limit).read_to_end(&mut value))
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    Ok(Bytes::from(value))
}

/// Writes a value's bytes to `path` (`-`: standard output).
fn write_value(path: &Path, value: &[u8]) -> Result<()> {
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        out.write_all(value)?;
        out.flush()?;
        return Ok(());
    }
    std::fs::write(path, value).with_context(|| format!("cannot write {}", path.display()))
}

/// `tagma kv`.
pub fn run(args: KvArgs) -> Result<()> {
    let dir = &args.dir;
    let cfg = cluster_dir::load_config(dir)?;
    let request_bytes_max = cfg.raw.limits.request_bytes_max;
    let b = |s: String| Bytes::from(s.into_bytes());
    let mut out_file = None;
    let op = match args.op {
        KvCmd::Put {
            key,
            value,
            value_file,
        } => {
            let value = match (value, value_file) {
                (_, Some(path)) => read_value(&path, request_bytes_max)?,
                (Some(v), None) => b(v),
                (None, None) => bail!("give VALUE or --value-file FILE"),
            };
            KvOp::Put { key: b(key), value }
        }
        KvCmd::Get { key, out } => {
            out_file = out;
            KvOp::Get { key: b(key) }
        }
        KvCmd::Delete { key } => KvOp::Delete { key: b(key) },
        KvCmd::Cas {
            key,
            expected,
            new,
            absent,
        } => match (absent, new) {
            (true, _) => KvOp::Cas {
                key: b(key),
                expected: None,
                new: b(expected),
            },
            (false, Some(new)) => KvOp::Cas {
                key: b(key),
                expected: Some(b(expected)),
                new: b(new),
            },
            (false, None) => bail!("give KEY EXPECTED NEW, or --absent KEY NEW"),
        },
        KvCmd::Incr { key, delta } => KvOp::Incr { key: b(key), delta },
        KvCmd::Scan { prefix, limit } => KvOp::Scan {
            prefix: b(prefix),
            limit,
        },
    };
    let request = op.encode();
    if request.len() > request_bytes_max {
        bail!(
            "the request is {} bytes, more than limits.request_bytes_max = {request_bytes_max} \
             in {} — fix: raise limits.request_bytes_max there (batch.batch_bytes_max and \
             limits.frame_bytes_max must stay larger) and restart the replicas",
            request.len(),
            cluster_dir::config_path(dir).display()
        );
    }
    let key_path = args
        .key
        .unwrap_or_else(|| cluster_dir::client_key_path(dir));
    let key = IdentityKey::read_file(&key_path)?;
    let mut options = ClientOptions::new(args.principal);
    if cfg.raw.eve.deployment == tagma_core::eve::Deployment::Bft {
        // The executors of an execute-verify BFT deployment: r + 1 matching replies.
        options.reply_quorum = Some(cfg.raw.eve.r + 1);
        options.leader_first = false;
    }
    let proxy = Proxy::connect(&cfg, key, options)?;
    let reply = if args.unordered && op.is_read_only() {
        proxy.invoke_unordered(request)?
    } else {
        proxy.invoke_ordered(request)?
    };
    drop(proxy);
    match KvReply::decode(&reply).context("undecodable reply")? {
        KvReply::Put { previous } => println!("ok (previous: {})", show(&previous)),
        KvReply::Get { value: Some(value) } => match &out_file {
            Some(path) => write_value(path, &value)?,
            None => println!("{}", show_value(&value)),
        },
        KvReply::Get { value: None } => {
            eprintln!("absent: the key has no value");
            std::process::exit(1);
        }
        KvReply::Delete { previous } => println!("deleted (previous: {})", show(&previous)),
        KvReply::Cas { applied, current } => println!(
            "{} (current: {})",
            if applied { "applied" } else { "not applied" },
            show(&current)
        ),
        KvReply::Incr { value } => println!("{value}"),
        KvReply::Scan { pairs } => {
            for (k, v) in pairs {
                println!("{}\t{}", String::from_utf8_lossy(&k), show_value(&v));
            }
        }
        KvReply::Error { message } => bail!("service error: {message}"),
        KvReply::Redis { .. } => bail!("the cluster answered with Redis replies to a kv command"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_as_numbers_and_text_as_text() {
        assert_eq!(show_value(&5i64.to_le_bytes()), "5");
        assert_eq!(show_value(&(-2i64).to_le_bytes()), "-2");
        assert_eq!(show_value(b"abcdefgh"), "abcdefgh");
        assert_eq!(show_value(b"(absent)"), "(absent)");
        assert_eq!(show_value(b"two\nlines"), "two\nlines");
        assert_eq!(show_value(b""), "");
        assert_eq!(show_value(&[0xff, 0x00, 0x01]), "\u{fffd}\u{0}\u{1}");
    }
}
