//! `tagma space`'s arguments: the options every operation shares and one subcommand per
//! operation.

use std::path::PathBuf;

use tagma_node::cluster_dir::DEFAULT_CLIENT_PRINCIPAL;

pub(crate) const SYNTAX: &str = "Tuples and templates are written as in `(\"job\", 42, 0x00ff)`: integers, \
\"strings\" (escapes \\\" \\\\ \\n \\r \\t \\u{hex}) and bytes as 0x and hex digits; a template \
may use * (any field), *int, *str and *bytes. Quote them for the shell: \
tagma space --dir c1 out jobs '(\"build\", 42)'. Policies are lines such as `read: any`, \
`insert: 1, 2`, `take: creator`, `admin: 1`, `take requires field 0 = invoker`, \
`unique (\"lock\", *)`. A protected space (create --protection public,comparable,private) \
keeps comparable fields as keyed hashes and private ones sealed among the replicas; its \
clients share a 32-byte space key (tagma space keygen FILE) and pass it with --space-key \
FILE: tuples in and out are then the original ones.";

/// `tagma space`.
#[derive(clap::Args)]
#[command(after_help = SYNTAX)]
pub struct SpaceArgs {
    /// The cluster directory (written by `tagma init`); its replicas must run
    /// `--service space`. Every operation but keygen needs it.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Client secret key [default: DIR/keys/client.key].
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Client principal id of that key.
    #[arg(long, default_value_t = DEFAULT_CLIENT_PRINCIPAL)]
    pub principal: u32,
    /// Print the result as one JSON object (tuples in their text form).
    #[arg(long, global = true)]
    pub json: bool,
    /// The space key FILE (32 bytes) of a protected space: tuples are hashed and sealed on
    /// insertion, templates hashed, and every tuple read opened with the replicas' shares.
    /// Without it, operations on a protected space see the stored form (hashes and
    /// placeholders).
    #[arg(long, global = true, value_name = "FILE")]
    pub space_key: Option<PathBuf>,
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
        /// Protect the fields of the space's tuples, one of public, comparable (stored as a
        /// keyed hash: matched by equality) or private (sealed among the replicas) per
        /// field, comma-separated; tuples then have that many fields.
        #[arg(long, value_name = "LIST")]
        protection: Option<String>,
    },
    /// Write a fresh random space key (32 bytes, readable by its owner only) to FILE, for
    /// --space-key; it never overwrites a file. Needs no cluster.
    Keygen {
        /// Where to write the key.
        file: PathBuf,
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
        /// The space.
        space: String,
        /// The tuple, e.g. '("job", 7)'.
        tuple: String,
        /// The tuple vanishes this long after insertion unless renewed.
        #[arg(long)]
        lease_ms: Option<u64>,
    },
    /// Read the oldest tuple matching TEMPLATE (status 1 if none).
    Rdp {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// Read without ordering (faster; falls back to ordered if the replicas disagree).
        #[arg(long)]
        unordered: bool,
    },
    /// Take the oldest tuple matching TEMPLATE (status 1 if none).
    Inp {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
    },
    /// Read the oldest tuple matching TEMPLATE, waiting for one (status 1 on timeout).
    Rd {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// How long to wait.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Take the oldest tuple matching TEMPLATE, waiting for one (status 1 on timeout).
    In {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// How long to wait.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Insert TUPLE if nothing matches TEMPLATE; otherwise print the match (status 1).
    Cas {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// The tuple, e.g. '("job", 7)'.
        tuple: String,
        /// The inserted tuple vanishes this long after insertion unless renewed.
        #[arg(long)]
        lease_ms: Option<u64>,
    },
    /// Take the oldest match of TEMPLATE and insert TUPLE in its place (status 1 if none).
    Replace {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// The tuple, e.g. '("job", 7)'.
        tuple: String,
        /// The inserted tuple vanishes this long after insertion unless renewed.
        #[arg(long)]
        lease_ms: Option<u64>,
    },
    /// Read up to --max tuples matching TEMPLATE, oldest first.
    Rdall {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// The most tuples in the answer.
        #[arg(long, default_value_t = 100)]
        max: u32,
        /// Read without ordering.
        #[arg(long)]
        unordered: bool,
    },
    /// Take up to --max tuples matching TEMPLATE, oldest first.
    Inall {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// The most tuples in the answer.
        #[arg(long, default_value_t = 100)]
        max: u32,
    },
    /// Extend the leases of this client's tuples matching TEMPLATE.
    Renew {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// The new lease, from now (agreed time).
        #[arg(long)]
        lease_ms: u64,
    },
    /// Print the tuples matching TEMPLATE, then every one inserted later, as it is
    /// inserted (until interrupted, or --count tuples).
    Watch {
        /// The space.
        space: String,
        /// The template, e.g. '("job", *int)'.
        template: String,
        /// Stop after this many tuples.
        #[arg(long)]
        count: Option<u64>,
    },
}

impl SpaceCmd {
    /// The space whose tuples the operation works on (`None` for create, destroy, list and
    /// keygen, which a space key does not change).
    pub fn tuple_space(&self) -> Option<&str> {
        match self {
            SpaceCmd::Create { .. }
            | SpaceCmd::Destroy { .. }
            | SpaceCmd::List
            | SpaceCmd::Keygen { .. } => None,
            SpaceCmd::Out { space, .. }
            | SpaceCmd::Rdp { space, .. }
            | SpaceCmd::Inp { space, .. }
            | SpaceCmd::Rd { space, .. }
            | SpaceCmd::In { space, .. }
            | SpaceCmd::Cas { space, .. }
            | SpaceCmd::Replace { space, .. }
            | SpaceCmd::Rdall { space, .. }
            | SpaceCmd::Inall { space, .. }
            | SpaceCmd::Renew { space, .. }
            | SpaceCmd::Watch { space, .. } => Some(space),
        }
    }
}
